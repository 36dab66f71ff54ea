#!/usr/bin/env python3
"""Data-parallel training of a small CNN on synthetic MNIST-like data with ranktime.

Nothing is downloaded: each of 10 classes is a random 28x28 prototype, and samples are noisy
copies of it. Every rank generates the same data set and trains on its own shard; gradients are
averaged by ranktime.torch.DistributedOptimizer. --slow-rank R makes rank R sleep before every
step, so the timeline shows everyone waiting for it:

    PYTHONPATH=build/python build/ranktime run -np 4 --timeline-filename t.json -- \\
        /usr/bin/python3 examples/train_mnist_like.py --slow-rank 2
    build/ranktime summary t.json
"""

import argparse
import os
import time

import torch
from torch import nn

import ranktime
import ranktime.torch as rt


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per rank per step")
    parser.add_argument("--samples", type=int, default=4096, help="training set size (all ranks)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate (scaled by size)")
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--slow-rank", type=int, default=-1, help="rank that is late every step")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="how late the slow rank is")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def synthetic_mnist(samples, seed):
    """The same (images, labels) on every rank: noisy copies of 10 random class prototypes."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(10, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (samples,), generator=generator)
    images = prototypes[labels] + 2.0 * torch.randn(samples, 1, 28, 28, generator=generator)
    return images, labels


def main():
    args = parse_args()
    ranktime.init()
    rank, size = ranktime.rank(), ranktime.size()
    # Ranks share the machine's cores; one intra-op thread each avoids oversubscription.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranktime.local_size()))
    torch.manual_seed(args.seed + rank)  # different initial weights: the broadcast fixes them

    images, labels = synthetic_mnist(args.samples, args.seed)
    shard = torch.arange(rank, args.samples, size)  # every size-th sample, from this rank's
    steps_per_epoch = len(shard) // args.batch_size

    model = ConvNet() if args.model == "cnn" else MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    rt.broadcast_parameters(model.state_dict(), root_rank=0)
    rt.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = rt.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    if rank == 0:
        print("training a %s on %d ranks: %d samples, %d steps per epoch, batch %d per rank%s"
              % (args.model, size, args.samples, steps_per_epoch, args.batch_size,
                 ", rank %d late by %g ms per step" % (args.slow_rank, args.delay_ms)
                 if args.slow_rank >= 0 else ""), flush=True)
    for epoch in range(args.epochs):
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        started = time.perf_counter()
        loss_sum = torch.zeros(1, dtype=torch.float64)
        correct = torch.zeros(1, dtype=torch.float64)
        for step in range(steps_per_epoch):
            index = order[step * args.batch_size:(step + 1) * args.batch_size]
            if rank == args.slow_rank:
                time.sleep(args.delay_ms / 1000.0)  # a slower worker: its gradients come late
            optimizer.zero_grad()
            output = model(images[index])
            loss = nn.functional.cross_entropy(output, labels[index])
            loss.backward()
            optimizer.step()
            loss_sum += loss.item()
            correct += (output.argmax(1) == labels[index]).sum().item()
        # Averages over every rank's batches, for reporting.
        loss_sum = ranktime.allreduce(loss_sum, name="metrics.loss")
        correct = ranktime.allreduce(correct, name="metrics.correct", op=ranktime.Sum)
        if rank == 0:
            print("epoch %d: loss %.4f, train accuracy %.1f%%, %.2f s"
                  % (epoch + 1, loss_sum.item() / steps_per_epoch,
                     100.0 * correct.item() / (steps_per_epoch * args.batch_size * size),
                     time.perf_counter() - started), flush=True)

    if rank == 0 and os.environ.get("TIMELINE_FILENAME"):
        print("timeline: %s (try `ranktime summary %s`)"
              % (os.environ["TIMELINE_FILENAME"], os.environ["TIMELINE_FILENAME"]))
    ranktime.shutdown()


if __name__ == "__main__":
    main()

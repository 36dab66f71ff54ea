"""DistributedDataParallel on ranktime's torch.distributed backend. The only changes from a gloo
or NCCL script: `import ranktime.torch` (which registers the backend) and its name.

    export PYTHONPATH=$PWD/build/python
    build/ranktime run -np 4 --timeline-filename t.json -- /usr/bin/python3 examples/train_ddp.py
    build/ranktime summary t.json

A small classifier on synthetic data (nothing is downloaded); each rank trains on its shard.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ranktime.torch  # noqa: F401  (registers the "ranktime" backend)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps every step")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    return vars(parser.parse_args())


def synthetic_data(samples):
    """The same data set on every rank: noisy points around 10 class centres."""
    generator = torch.Generator().manual_seed(42)
    centres = 0.3 * torch.randn(10, 64, generator=generator)
    labels = torch.randint(0, 10, (samples,), generator=generator)
    return TensorDataset(centres[labels] + torch.randn(samples, 64, generator=generator), labels)


def main(epochs=3, batch_size=32, samples=8192, lr=0.01, slow_rank=-1, delay_ms=0.0):
    torch.set_num_threads(1)
    dist.init_process_group("ranktime")  # rank and world size come from `ranktime run` / mpirun
    rank, size = dist.get_rank(), dist.get_world_size()

    data = synthetic_data(samples)
    sampler = DistributedSampler(data, shuffle=True, seed=0)  # this rank's shard
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(rank)  # DDP starts every rank from rank 0's weights anyway
    model = DistributedDataParallel(nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=0.9)

    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, labels in loader:
            if rank == slow_rank:
                time.sleep(delay_ms / 1000)  # a straggler, for the timeline to find
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()  # gradient buckets are allreduced by ranktime as backward runs
            optimizer.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print("epoch %d: loss %.4f" % (epoch + 1, loss.item()), flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main(**parse_args())

#!/usr/bin/env python3
"""DDP step time on ranktime's torch.distributed backend against torch's own gloo, in one run:
the same model, data and DDP settings on a "ranktime" default group and a gloo group made from
it, plus ranktime with the timeline on. Rounds rotate the variants' order; each round times
`--steps` steps of each after `--warmup` untimed ones.

    PYTHONPATH=build/python build/ranktime run -np 2 -- \\
        /usr/bin/python3 bench/ddp_bench.py --rounds 8

Prints per variant rank 0's median and mean step time over every timed step, and the CPU time
every rank's process used per step (all its threads: training, ranktime's or gloo's, summed over
the ranks), then the ratios ranktime / gloo and timeline on / off: of the medians, of the means,
the median over rounds of each round's ratio (variants that ran minutes apart compare worse on a
shared machine than variants of the same round), and of the CPU per step (a wait that polls
instead of sleeping shows there, and on cores shared with other work it costs step time).
Targets: ranktime / gloo <= 1 (not slower); timeline on / off close to 1.
"""

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ranktime
import ranktime.torch  # noqa: F401  (registers the backend)

MODELS = {
    # (input features, hidden width, hidden layers, classes)
    "small": (64, 256, 2, 10),     # 0.09 M parameters: latency-bound
    "medium": (256, 1024, 2, 10),  # 1.3 M parameters (5 MiB of gradients, 2 DDP buckets)
}


def make_model(name):
    features, width, layers, classes = MODELS[name]
    sizes = [features] + [width] * layers
    body = []
    for a, b in zip(sizes, sizes[1:]):
        body += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*body, nn.Linear(width, classes))


class Trainer:
    """A DDP model and its optimizer on one process group (None: the default, ranktime)."""

    def __init__(self, model, group):
        self.ddp = DistributedDataParallel(model, process_group=group)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(self, inputs, labels):
        self.optimizer.zero_grad()
        nn.functional.cross_entropy(self.ddp(inputs), labels).backward()
        self.optimizer.step()


def timed_run(trainer, batches, warmup, timeline_path=None):
    """This rank's step times in milliseconds (the steps wait for each other's gradients, so
    every rank's are about the same) and the CPU seconds its process used meanwhile; with the
    timeline on if a path is given (rank 0 writes it, then deletes it)."""
    for inputs, labels in batches[:warmup]:
        trainer.step(inputs, labels)
    if timeline_path is not None:
        ranktime.start_timeline(timeline_path)
    dist.barrier()
    times = []
    cpu_start = time.process_time()
    for inputs, labels in batches[warmup:]:
        start = time.perf_counter()
        trainer.step(inputs, labels)
        times.append(1000.0 * (time.perf_counter() - start))
    cpu = time.process_time() - cpu_start
    if timeline_path is not None:
        ranktime.stop_timeline()
        if dist.get_rank() == 0:
            os.remove(timeline_path)
    return times, cpu


def median(values):
    return statistics.median(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="small,medium", help="from: " + ", ".join(MODELS))
    parser.add_argument("--batch-size", type=int, default=8, help="per rank")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeline-dir", default=tempfile.gettempdir(),
                        help="where rank 0 writes (and deletes) the timeline-on variant's files")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("ranktime")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    if rank == 0:
        print("ddp_bench: %d ranks, torch %s, batch %d per rank, %d steps x %d rounds"
              % (size, torch.__version__, args.batch_size, args.steps, args.rounds), flush=True)

    for model_name in args.models.split(","):
        features, _, _, classes = MODELS[model_name]
        generator = torch.Generator().manual_seed(rank)
        batches = [(torch.randn(args.batch_size, features, generator=generator),
                    torch.randint(0, classes, (args.batch_size,), generator=generator))
                   for _ in range(args.warmup + args.steps)]
        torch.manual_seed(0)
        models = [make_model(model_name) for _ in range(2)]
        models[1].load_state_dict(models[0].state_dict())
        on_gloo, on_ranktime = Trainer(models[0], gloo), Trainer(models[1], None)
        timeline = os.path.join(args.timeline_dir, "ddp_bench_timeline.json")
        # The timeline variant is the ranktime model with the timeline switched on.
        variants = [("gloo", on_gloo, None), ("ranktime", on_ranktime, None),
                    ("ranktime+timeline", on_ranktime, timeline)]
        times = {label: [] for label, _, _ in variants}  # per round: step times
        cpu = {label: 0.0 for label, _, _ in variants}  # seconds, this rank
        for round_index in range(args.rounds):
            for label, trainer, path in variants[round_index % 3:] + variants[:round_index % 3]:
                steps, seconds = timed_run(trainer, batches, args.warmup, path)
                times[label].append(steps)
                cpu[label] += seconds
        # CPU ms per step, summed over the ranks.
        summed = torch.tensor([cpu[label] for label, _, _ in variants], dtype=torch.float64)
        dist.all_reduce(summed, group=gloo)
        cpu_ms = {label: 1000.0 * summed[i].item() / (args.rounds * args.steps)
                  for i, (label, _, _) in enumerate(variants)}
        if rank != 0:
            continue
        parameters = sum(p.numel() for p in models[0].parameters())
        print("\nmodel %s: %.2f M parameters" % (model_name, parameters / 1e6))
        print("  %-18s %9s %9s %9s   %s" % ("variant", "median ms", "mean ms", "CPU ms",
                                             "median step of each round (ms)"))
        for label, rounds in times.items():
            steps = [t for r in rounds for t in r]
            print("  %-18s %9.3f %9.3f %9.3f   %s"
                  % (label, median(steps), statistics.mean(steps), cpu_ms[label],
                     " ".join("%.2f" % median(r) for r in rounds)))
        for name, a, b in (("ranktime / gloo", "ranktime", "gloo"),
                           ("timeline on / off", "ranktime+timeline", "ranktime")):
            steps_a = [t for r in times[a] for t in r]
            steps_b = [t for r in times[b] for t in r]
            paired = [median(x) / median(y) for x, y in zip(times[a], times[b])]
            print("  %-18s %6.3f (median steps), %6.3f (mean steps), %6.3f (median of rounds' "
                  "ratios), %6.3f (CPU per step)"
                  % (name, median(steps_a) / median(steps_b),
                     statistics.mean(steps_a) / statistics.mean(steps_b), median(paired),
                     cpu_ms[a] / cpu_ms[b]))

    dist.destroy_process_group()


if __name__ == "__main__":
    main()

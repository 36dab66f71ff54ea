#!/usr/bin/env python3
"""The Python bindings' overhead: ranktime-synth's training step, driven from Python with torch
tensors. Each step submits every gradient of the workload in reverse order (as backward does)
with allreduce_async_, then waits for all; the summary line matches ranktime-synth's, so the two
medians compare directly:

    ranktime run -np 4 -- /usr/bin/python3 bench/python_overhead_bench.py \\
        --workload examples/workloads/resnet50.tsv --steps 20
    ranktime run -np 4 -- build/ranktime-synth --workload examples/workloads/resnet50.tsv \\
        --steps 20 --quiet

(PYTHONPATH=build/python.) overhead ratio = python median_step_ms / ranktime-synth median_step_ms.
"""

import argparse
import os
import statistics
import time

import torch

import ranktime

DEFAULT_WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "workloads", "resnet50.tsv")


def read_workload(path):
    """[(name, shape)] from a name<TAB>shape<TAB>elements file ('#' starts a comment)."""
    tensors = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, shape, elements = line.split("\t")
            dims = [int(d) for d in shape.split("x")]
            assert int(elements) == int(torch.tensor(dims).prod()), line
            tensors.append((name, dims))
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default=DEFAULT_WORKLOAD)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--dtype", default="float32",
                        choices=["uint8", "int8", "int32", "int64", "float16", "bfloat16",
                                 "float32", "float64"])
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="print only the summary line")
    parser.add_argument("--no-barrier", action="store_true",
                        help="do not line the ranks up before each step")
    args = parser.parse_args()

    torch.set_num_threads(1)
    workload = read_workload(args.workload)
    ranktime.init()
    rank, size = ranktime.rank(), ranktime.size()
    dtype = getattr(torch, args.dtype)
    gradients = [(name, torch.empty(shape, dtype=dtype)) for name, shape in workload]
    total_bytes = sum(t.numel() * t.element_size() for _, t in gradients)
    expected = size * (size + 1) // 2  # every rank contributes rank + 1: exact in every dtype

    step_ms, submit_us, failures = [], [], 0
    for step in range(args.warmup + args.steps):
        for _, tensor in gradients:
            tensor.fill_(rank + 1)
        if not args.no_barrier:
            ranktime.barrier()  # untimed, as in ranktime-synth
        start = time.perf_counter()
        handles = [ranktime.allreduce_async_(tensor, name="grad." + name, op=ranktime.Sum)
                   for name, tensor in reversed(gradients)]
        submitted = time.perf_counter()
        for handle in handles:
            handle.wait()
        finished = time.perf_counter()
        if step >= args.warmup:
            step_ms.append((finished - start) * 1e3)
            submit_us.append((submitted - start) * 1e6 / len(gradients))
            if not args.quiet and rank == 0:
                print("step %d: %.3f ms" % (step - args.warmup, step_ms[-1]), flush=True)
        if not args.no_verify:
            for name, tensor in gradients:
                if not bool((tensor == expected).all()):
                    print("python_overhead_bench rank %d: step %d tensor '%s' is not %d"
                          % (rank, step, name, expected), flush=True)
                    failures += 1
                    break
    ranktime.shutdown()
    if rank == 0:  # median as ranktime-synth takes it: the upper one for an even count
        print("python_overhead_bench: ranks=%d tensors=%d bytes=%d dtype=%s steps=%d "
              "median_step_ms=%.3f mean_step_ms=%.3f min_step_ms=%.3f median_submit_us=%.2f "
              "verify=%s" % (size, len(gradients), total_bytes, args.dtype, len(step_ms),
                             sorted(step_ms)[len(step_ms) // 2], statistics.fmean(step_ms),
                             min(step_ms), statistics.median(submit_us),
                             "skipped" if args.no_verify else ("FAILED" if failures else "ok")),
              flush=True)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()

"""A small model trained under ranktime.torch with ranktime.torch.profile (test_profile_merge.py
runs it on 2 and 4 ranks): forward in a `forward` region (ranktime.torch.instrument or
ranktime.region, whichever this build has) and a `job.forward` profiler range; each gradient's
allreduce submitted inside a `job.submit.<name>` profiler range. With SLOW_RANK, that rank also
sleeps 20 ms per step inside forward, in a `slow_op` profiler range (the operator the summary's
causes should name).

    profile_job.py OUT_DIR STEPS [SKEWS_US [SLOW_RANK]]   # SKEWS_US: "0,50000,...", per rank
"""
import contextlib
import os
import sys
import time

out_dir, steps = sys.argv[1], int(sys.argv[2])
slow_rank = int(sys.argv[4]) if len(sys.argv) > 4 else -1
if len(sys.argv) > 3:  # before init(): the runtime reads it at start-up
    rank_env = int(os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ["RANKTIME_TEST_CLOCK_SKEW_US"] = sys.argv[3].split(",")[rank_env]

import torch  # noqa: E402
from torch.profiler import record_function  # noqa: E402

import ranktime  # noqa: E402
import ranktime.torch as rt  # noqa: E402

rt.init()
torch.manual_seed(rt.rank())
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
region = getattr(ranktime, "region", None)


def forward_region():
    return region("forward") if region is not None else contextlib.nullcontext()


with rt.profile(dir=out_dir) as profiler:
    for step in range(steps):
        ranktime.mark_step()
        x = torch.randn(16, 32)
        with forward_region(), record_function("job.forward"):
            loss = model(x).pow(2).mean()
            if rt.rank() == slow_rank:
                with record_function("slow_op"):
                    time.sleep(0.02)
        optimizer.zero_grad()
        loss.backward()
        handles = []
        for name, p in model.named_parameters():
            with record_function("job.submit." + name):
                handles.append(rt.allreduce_async_(p.grad, name="grad." + name))
        for h in handles:
            rt.synchronize(h)
        optimizer.step()
        profiler.step()
print("rank %d: done %d steps, region %s" % (rt.rank(), steps, region is not None))
rt.shutdown()

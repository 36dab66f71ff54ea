"""Timelines started from Python: valid Chrome-trace JSON with every rank's lanes, tensors named
after parameters, a new file per start, every rank's `ranktime.mark_step()` as STEP slices, and
`ranktime check` passing on them."""

import json
import os
import subprocess
import tempfile
import time

import numpy as np
import pytest
import torch
from torch import nn

import ranktime
import ranktime.torch as rt

CLI = os.path.join(os.environ.get("RANKTIME_BUILD_DIR", ""), "ranktime")


def shared_path(tag):
    """One file name for all ranks (rank 0's choice): only rank 0 writes the timeline."""
    directory = os.environ.get("RANKTIME_TEST_OUTPUT_DIR", tempfile.gettempdir())
    token = ranktime.broadcast(np.array([os.getpid()], np.int64), 0, name="test.path")[0]
    path = os.path.join(directory, "timeline_%s_np%d_%d.json" % (tag, ranktime.size(), token))
    if ranktime.rank() == 0 and os.path.exists(path):
        os.remove(path)
    ranktime.barrier()
    return path


def read_timeline(path, deadline_s=30.0):
    """The events of a completed timeline file (waits for the writer to finish it)."""
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            with open(path) as f:
                events = json.load(f)
            if any(e.get("name") == "ranktime_run_end" for e in events):
                return events
        except (OSError, ValueError):
            pass
        if time.monotonic() > give_up:
            with open(path) as f:
                tail = f.read()[-2000:]
            raise AssertionError("%s is not a completed timeline; it ends with:\n%s" % (path, tail))
        time.sleep(0.1)


def process_names(events):
    return {e["pid"]: e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.layer1(x))


def train_steps(steps):
    model = Net()
    rt.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=model.named_parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()


def test_timeline_from_python_shows_parameter_names_and_every_rank():
    path = shared_path("training")
    steps = 3
    with ranktime.timeline(path, mark_cycles=True) as started:
        assert started == path
        train_steps(steps)
        ranktime.allgather(np.ones((1, 2)), name="gathered")
    ranktime.barrier()
    if ranktime.rank() != 0:
        return
    events = read_timeline(path)
    assert isinstance(events, list)
    run = next(e for e in events if e.get("name") == "ranktime_run")
    assert run["args"]["ranks"] == ranktime.size()
    assert any(e.get("name") == "CYCLE_START" for e in events)

    names = process_names(events)
    for parameter in ["layer1.0.weight", "layer1.0.bias", "layer1.2.weight", "head.bias"]:
        assert "allreduce." + parameter in names.values(), sorted(names.values())
        assert "broadcast." + parameter in names.values()
    assert "allgather.gathered" in names.values()

    pid = next(p for p, n in names.items() if n == "allreduce.layer1.0.weight")
    lane = [e for e in events if e.get("pid") == pid]
    negotiations = [e for e in lane if e.get("name") == "NEGOTIATE_ALLREDUCE" and e["ph"] == "X"]
    assert len(negotiations) == steps
    ticks = [e for e in lane if e.get("ph") == "X" and e.get("tid") == 0 and e["name"].isdigit()]
    assert sorted(int(e["name"]) for e in ticks) == sorted(list(range(ranktime.size())) * steps)
    for r in range(ranktime.size()):  # every rank's processing lane is in the file
        slices = [e for e in lane if e.get("tid") == 1 + r and e.get("name") == "ALLREDUCE"
                  and e["ph"] == "X"]
        assert len(slices) == steps, "rank %d has %d ALLREDUCE slices" % (r, len(slices))
        assert slices[0]["args"]["dtype"] == "float32"
        assert slices[0]["args"]["shape"] == [16, 8]


def test_mark_step_makes_a_step_slice_per_step_for_every_rank():
    """On pid 0, a thread `steps rank r` per rank with one STEP complete slice per marked step
    (args `step`: the number given, or the one after the rank's last), in order, each from its
    mark to the next (the last to the stop)."""
    path = shared_path("steps")
    with ranktime.timeline(path):
        for step in (100, 101, None):  # numbered by the caller, then counted on from there
            ranktime.mark_step(step)
            ranktime.allreduce(np.ones(4), name="per.step")
    ranktime.barrier()
    if ranktime.rank() != 0:
        return
    events = read_timeline(path)
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == 0}
    steps = {}
    for e in events:
        if e.get("name") == "STEP":
            assert e["pid"] == 0 and e["ph"] == "X" and e["dur"] >= 0, e
            steps.setdefault(threads[e["tid"]], []).append((e["args"]["step"], e["ts"], e["dur"]))
    assert sorted(steps) == sorted("steps rank %d" % r for r in range(ranktime.size()))
    for thread, slices in steps.items():
        assert [s for s, _, _ in slices] == [100, 101, 102], thread
        for (_, ts, dur), (_, next_ts, _) in zip(slices, slices[1:]):
            assert ts + dur == pytest.approx(next_ts, abs=0.002), thread  # a step ends at the next mark


def test_each_start_writes_a_new_complete_file():
    first, second = shared_path("first"), shared_path("second")
    ranktime.start_timeline(first)
    ranktime.allreduce(np.ones(3), name="in.first")
    ranktime.stop_timeline()
    ranktime.allreduce(np.ones(3), name="in.neither")
    ranktime.start_timeline(second, mark_cycles=False)
    ranktime.allreduce(np.ones(3), name="in.second")
    ranktime.stop_timeline()
    ranktime.barrier()
    if ranktime.rank() != 0:
        return
    first_names = set(process_names(read_timeline(first)).values())
    second_names = set(process_names(read_timeline(second)).values())
    assert "allreduce.in.first" in first_names and "allreduce.in.second" not in first_names
    assert "allreduce.in.second" in second_names and "allreduce.in.first" not in second_names
    assert "allreduce.in.neither" not in first_names | second_names


@pytest.mark.skipif(not os.access(CLI, os.X_OK),
                    reason="the ranktime CLI (%s) is not built; cannot run `ranktime check`" % CLI)
def test_timeline_passes_ranktime_check():
    path = shared_path("check")
    with ranktime.timeline(path):
        train_steps(2)
    ranktime.barrier()
    if ranktime.rank() != 0:
        return
    read_timeline(path)
    check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@ranktime.region("forward")
def forward_pass(x):
    """A decorated function: each call is a region named "forward"."""
    return ranktime.allreduce(x, name="region.grad")


def test_regions_from_with_and_decorator_nest_on_each_ranks_thread():
    """`with ranktime.region(...)` and `@ranktime.region(...)`: slices on the `regions` thread of
    each rank's process, nested, names kept as text; `ranktime check` passes on the file."""
    path = shared_path("regions")
    name = "</script><script>alert(1)</script>"
    with ranktime.timeline(path):
        for _ in range(2):
            ranktime.mark_step()
            with ranktime.region("step"):
                with ranktime.region(name):
                    pass
                out = forward_pass(np.ones(4))
    assert out[0] == ranktime.size()  # the decorated function's result
    assert forward_pass.__name__ == "forward_pass"
    ranktime.barrier()
    if ranktime.rank() != 0:
        return
    events = read_timeline(path)
    names = process_names(events)
    for rank in range(ranktime.size()):
        pid = 1_000_000_000 + rank
        assert names[pid] == "rank %d" % rank
        slices = [e for e in events if e.get("ph") == "X" and e["pid"] == pid]
        assert [e["name"] for e in slices] == ["step", name, "forward"] * 2
        assert all(e["tid"] == 1 for e in slices)
        for outer, inner in ((0, 1), (0, 2), (3, 4), (3, 5)):
            o, i = slices[outer], slices[inner]
            assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 0.002
    if os.access(CLI, os.X_OK):
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_region_misuse_raises_naming_the_region_and_the_rank():
    with pytest.raises(ranktime.RanktimeError, match=r'"not begun".* on rank %d' % ranktime.rank()):
        ranktime.region_end("not begun")
    ranktime.region_begin("outer")
    ranktime.region_begin("inner")
    with pytest.raises(ranktime.RanktimeError, match='"inner", begun inside it, is still open'):
        ranktime.region_end("outer")
    ranktime.region_end("inner")
    ranktime.region_end("outer")
    with pytest.raises(TypeError):
        ranktime.region(3)
    # An exception inside the block still ends the region (no region is left open).
    with pytest.raises(KeyError):
        with ranktime.region("raises"):
            raise KeyError("x")
    with pytest.raises(ranktime.RanktimeError, match="no region is open"):
        ranktime.region_end("raises")

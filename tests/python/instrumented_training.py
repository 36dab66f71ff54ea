"""Training loops under ranktime.torch.instrument in which the last rank is slow in one phase (its
data loader, or one layer's backward through a hook that sleeps), and what the timeline and
`ranktime summary` say about them. test_instrument.py runs them with DistributedOptimizer,
test_instrument_ddp.py with DDP on the "ranktime" backend."""

import json
import subprocess
import time

import torch
from torch import nn

import ranktime
import ranktime.torch as rt
from test_timeline import CLI, read_timeline, shared_path

STEPS = 8
DELAY_S = 0.03  # the slow rank's extra time in its slow phase, each step
PHASES = ["data", "forward", "backward", "optimizer"]
RANK_PROCESS_PID_BASE = 1000000000  # trace_names.h: rank R's regions are on pid base + R, tid 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(16, 32)
        self.last = nn.Linear(32, 4)

    def forward(self, x):
        return self.last(torch.relu(self.first(x)))


class Batches:
    """STEPS batches; with `delay_s`, each takes that long to arrive (a slow data loader)."""

    def __init__(self, delay_s=0.0):
        generator = torch.Generator().manual_seed(ranktime.rank())
        self._batches = [(torch.randn(8, 16, generator=generator),
                          torch.randint(0, 4, (8,), generator=generator)) for _ in range(STEPS)]
        self._delay_s = delay_s

    def __len__(self):
        return len(self._batches)

    def __iter__(self):
        for batch in self._batches:
            time.sleep(self._delay_s)
            yield batch


def train(ddp, slow=None):
    """STEPS instrumented steps; the last rank is DELAY_S slower in phase `slow`."""
    slow_here = ranktime.rank() == ranktime.size() - 1
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        top = DistributedDataParallel(model)
    else:
        top = model
        rt.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = rt.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    if slow == "backward" and slow_here:
        # The first layer's weight gradient is backward's last: the rank's last tensor is late.
        model.first.weight.register_hook(lambda grad: time.sleep(DELAY_S))
    loader = rt.instrument(top, optimizer,
                           Batches(DELAY_S if slow == "data" and slow_here else 0.0))
    assert len(loader) == STEPS
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(top(inputs), labels)
        loss.backward()
        optimizer.step()


def traced(tag, ddp, slow=None):
    """A timeline of train(ddp, slow): its path, complete, on rank 0; None elsewhere."""
    path = shared_path(tag)
    with ranktime.timeline(path):
        train(ddp, slow)
    ranktime.barrier()
    return path if ranktime.rank() == 0 else None


def regions_and_steps(events, rank):
    """Rank's regions [(name, ts, end)] and STEP slices [(ts, end)], each in time order."""
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == 0}
    regions = sorted((e["name"], e["ts"], e["ts"] + e["dur"]) for e in events
                     if e.get("ph") == "X" and e.get("pid") == RANK_PROCESS_PID_BASE + rank
                     and e.get("tid") == 1)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("name") == "STEP" and threads.get(e["tid"]) == "steps rank %d" % rank)
    return sorted(regions, key=lambda r: r[1]), steps


def assert_phases_in_every_step(path):
    """Each rank: one STEP mark per step and one more after the last; each step holds data,
    forward, backward and optimizer regions, in that order, beginning inside it."""
    if path is None:
        return
    events = read_timeline(path)
    for rank in range(ranktime.size()):
        regions, steps = regions_and_steps(events, rank)
        assert len(steps) == STEPS + 1, "rank %d: %d STEP slices for %d steps" % (
            rank, len(steps), STEPS)
        for k, (begin, end) in enumerate(steps[:STEPS]):
            inside = [name for name, ts, _ in regions if begin <= ts < end]
            assert inside == PHASES, "rank %d step %d: %s" % (rank, k, inside)


def assert_cause(path, region):
    """`ranktime summary` names the last rank and `region` as the cause, in JSON and text."""
    if path is None:
        return
    run = subprocess.run([CLI, "summary", "--format", "json", path], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    causes = json.loads(run.stdout)["causes"]
    slow = ranktime.size() - 1
    assert causes, "no causes in the summary of %s" % path
    top = causes[0]
    assert (top["rank"], top["region"]) == (slow, region), causes[:3]
    assert top["explained_pct"] >= 50, causes[:3]
    text = subprocess.run([CLI, "summary", path], capture_output=True, text=True).stdout
    assert "cause: rank %d was late" % slow in text, text
    assert 'its "%s" region took' % region in text, text

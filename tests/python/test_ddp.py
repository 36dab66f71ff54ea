"""DistributedDataParallel on the "ranktime" backend: training ends with bitwise identical weights
on every rank that match one process on the whole data; communication hooks through futures;
each gradient bucket keeps its name step after step, in a timeline that passes `ranktime check`;
and a rank that is late every step is the one `ranktime summary` names."""

import os
import re
import subprocess
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import ranktime
from c10d_group import every_rank, ranktime_process_group  # noqa: F401  (autouse fixture)
from test_timeline import CLI, process_names, read_timeline, shared_path
from test_torch import (EPOCHS, Net, dataset, flat, local_batches, make_optimizer,
                        train_single_process)

MANAGES_RUNTIME = True  # init_process_group starts ranktime


def train_ddp(hook=None):
    """test_torch's training, with DDP instead of DistributedOptimizer; (model, initial state)."""
    r, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(100 + r)  # different on every rank: DDP's constructor broadcasts rank 0's
    model = Net()
    ddp = DistributedDataParallel(model)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = make_optimizer(model)
    x, y = dataset(size)
    for epoch in range(EPOCHS):
        for inputs, labels in local_batches(x, y, r, size, epoch):
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp(inputs), labels).backward()
            optimizer.step()
    return model, initial


def test_training_is_identical_on_every_rank_and_matches_one_process():
    model, initial = train_ddp()
    start = torch.cat([v.reshape(-1) for v in initial.values()])
    assert all(torch.equal(s, start) for s in every_rank(start))  # rank 0's, broadcast by DDP
    weights = flat(model)
    for r, w in enumerate(every_rank(weights)):
        assert torch.equal(w, weights), "rank %d's weights differ" % r
    assert not torch.equal(weights, start)
    reference = flat(train_single_process(initial, dist.get_world_size()))
    torch.testing.assert_close(weights, reference, rtol=1e-5, atol=1e-6)


def allreduce_hook(state, bucket):
    """DDP's default reduction, written as a Python communication hook over a future."""
    tensor = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])


def test_communication_hooks_run_on_futures():
    default, _ = train_ddp()
    hooked, _ = train_ddp(allreduce_hook)
    assert torch.equal(flat(hooked), flat(default))  # the same reductions, bit for bit
    compressed, _ = train_ddp(default_hooks.fp16_compress_hook)  # float16 allreduce, then()
    weights = flat(compressed)
    assert all(torch.equal(w, weights) for w in every_rank(weights))
    torch.testing.assert_close(weights, flat(default), rtol=1e-2, atol=1e-3)
    assert not torch.equal(weights, flat(default))


class Branchy(nn.Module):
    """Buffers (batch norm statistics), and a layer that forward never uses."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 8)
        self.norm = nn.BatchNorm1d(8)
        self.unused = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.fc(x))))


def test_buffers_and_unused_parameters():
    torch.manual_seed(dist.get_rank())
    model = Branchy()
    ddp = DistributedDataParallel(model, find_unused_parameters=True,
                                  gradient_as_bucket_view=True)
    ddp_steps(ddp, torch.optim.SGD(model.parameters(), lr=0.1), 3)
    ddp.eval()
    with torch.no_grad():
        ddp(torch.randn(4, 20))  # broadcasts rank 0's statistics first, as every forward does
    state = torch.cat([v.double().reshape(-1) for v in model.state_dict().values()])
    for r, s in enumerate(every_rank(state)):
        assert torch.equal(s, state), "rank %d's parameters or buffers differ" % r
    assert int(model.norm.num_batches_tracked) == 3


class Wide(nn.Module):
    """Two gradient buckets: fc2's 4 MiB fill DDP's first (1 MiB) bucket, fc1 the next."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 16384)
        self.fc2 = nn.Linear(16384, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def ddp_steps(ddp, optimizer, steps, late_rank=None, delay_s=0.0):
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(steps):
        if dist.get_rank() == late_rank:
            time.sleep(delay_s)
        inputs = torch.randn(8, 20, generator=generator)
        optimizer.zero_grad()
        ddp(inputs).square().mean().backward()
        optimizer.step()


def allreduce_slices(events):
    """{tensor name: [shape of each ALLREDUCE on rank 0's lane]}. The writer gives a slice's
    shape only where it changes on its lane: a slice without one has its lane's last."""
    names = process_names(events)
    slices = {}
    for e in events:
        if e.get("name") == "ALLREDUCE" and e.get("ph") in ("B", "X") and e.get("tid") == 1:
            shapes = slices.setdefault(names[e["pid"]], [])
            shapes.append(e["args"]["shape"] if "shape" in e.get("args", {}) else shapes[-1])
    return slices


def run_cli(*args):
    run = subprocess.run([CLI] + list(args), capture_output=True, text=True)
    assert run.returncode == 0, " ".join(args) + "\n" + run.stdout + run.stderr
    return run.stdout


def test_buckets_keep_their_names_in_a_timeline_that_passes_check():
    model = Wide()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # DDP rebuilds its buckets after the first step; by the third, every step repeats the last.
    ddp_steps(ddp, optimizer, 2)
    path = shared_path("ddp_buckets")
    ranktime.start_timeline(path)
    ddp_steps(ddp, optimizer, 4)
    ranktime.stop_timeline()
    if dist.get_rank() != 0:
        return
    slices = allreduce_slices(read_timeline(path))
    assert sorted(slices) == ["c10d.0", "c10d.1"], slices
    assert [len(shapes) for shapes in slices.values()] == [4, 4], slices
    bucket_sizes = {64 + 16384 * 64, 16384 + 20 * 16384}  # fc2's, fc1's
    assert {shapes[0][0] for shapes in slices.values()} == bucket_sizes, slices
    assert all(shapes == shapes[:1] * 4 for shapes in slices.values()), slices
    if os.access(CLI, os.X_OK):
        run_cli("check", path)


def test_a_late_rank_is_named_by_ranktime_summary():
    late = dist.get_world_size() - 1
    model = Net()
    ddp = DistributedDataParallel(model)
    optimizer = make_optimizer(model)
    ddp_steps(ddp, optimizer, 2)
    path = shared_path("ddp_late")
    before = {entry.rank: entry.times_last for entry in ranktime.lateness()}  # rank 0's
    ranktime.start_timeline(path)
    ddp_steps(ddp, optimizer, 8, late_rank=late, delay_s=0.05)
    ranktime.stop_timeline()
    if dist.get_rank() != 0:
        return
    last = {e.rank: e.times_last - before[e.rank] for e in ranktime.lateness()}  # these 8 steps'
    assert max(last, key=last.get) == late, last
    read_timeline(path)  # complete
    if os.access(CLI, os.X_OK):
        summary = run_cli("summary", path)
        print(summary)
        assert re.search(r"^slowest rank: %d\b" % late, summary, re.MULTILINE), summary
        run_cli("check", path)

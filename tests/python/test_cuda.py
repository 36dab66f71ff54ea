"""The "ranktime" torch.distributed backend on CUDA tensors, at one rank on one GPU: DDP training
(its bucketed allreduce and start-up broadcast on ranktime's GPU path) ends with the weights of
the same training in one process without DDP; broadcast, all_gather and reduce_scatter_tensor of
CUDA tensors give exact results; and the timeline, with the GPU path's phases, passes
`ranktime check`. Skips where torch sees no CUDA device (ctest reports the skip)."""

import os
import subprocess

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is false (this torch has %s)"
                % ("no CUDA support" if torch.version.cuda is None else "CUDA but sees no GPU"),
                allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import ranktime  # noqa: E402
from c10d_group import ranktime_process_group  # noqa: E402,F401  (autouse fixture)
from test_timeline import CLI, read_timeline, shared_path  # noqa: E402
from test_torch import (EPOCHS, Net, dataset, flat, local_batches,  # noqa: E402
                        make_optimizer, train_single_process)

MANAGES_RUNTIME = True  # init_process_group starts ranktime
DEVICE = torch.device("cuda", 0)


def test_one_rank_on_one_gpu():
    # At one rank every result below is the rank's own data; more ranks need a GPU each (NCCL
    # refuses two ranks on one GPU), which this test does not assume.
    assert dist.get_world_size() == 1, "run test_cuda.py at one rank"


def train_ddp_on_cuda():
    """test_torch's training with DDP on CUDA; (model, initial state on the CPU)."""
    torch.manual_seed(100)
    model = Net().to(DEVICE)
    initial = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    ddp = DistributedDataParallel(model, device_ids=[DEVICE.index])
    optimizer = make_optimizer(model)
    x, y = dataset(1)
    for epoch in range(EPOCHS):
        for inputs, labels in local_batches(x, y, 0, 1, epoch):
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp(inputs.to(DEVICE)), labels.to(DEVICE)).backward()
            optimizer.step()
    torch.cuda.synchronize()
    return model, initial


def test_ddp_training_on_cuda_matches_one_process():
    model, initial = train_ddp_on_cuda()
    reference = train_single_process(initial, 1)  # on the CPU: float32 on either, not bitwise
    torch.testing.assert_close(flat(model).cpu(), flat(reference), rtol=1e-4, atol=1e-5)


def test_collectives_of_cuda_tensors_are_exact():
    values = torch.arange(12, dtype=torch.float32, device=DEVICE).reshape(3, 4)
    t = values.clone()
    dist.broadcast(t, 0)
    assert torch.equal(t, values)
    t = values.t()  # not contiguous: through a contiguous buffer, written back
    dist.all_reduce(t)
    assert torch.equal(t, values.t())
    gathered = [torch.empty_like(values)]
    dist.all_gather(gathered, values)
    assert torch.equal(gathered[0], values) and gathered[0].device == DEVICE
    out = torch.empty_like(values)
    dist.reduce_scatter_tensor(out, values)  # the GPU path: NCCL reduce-scatter
    assert torch.equal(out, values) and out.device == DEVICE
    work = dist.all_reduce(t, async_op=True)
    assert torch.equal(work.get_future().wait()[0], values.t())


def test_timeline_shows_the_gpu_phases_and_passes_check():
    path = shared_path("cuda_ddp")
    ranktime.start_timeline(path)
    train_ddp_on_cuda()
    ranktime.stop_timeline()
    names = {e.get("name") for e in read_timeline(path)}
    assert "NCCL_ALLREDUCE" in names, sorted(n for n in names if n)
    if os.access(CLI, os.X_OK):
        run = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr

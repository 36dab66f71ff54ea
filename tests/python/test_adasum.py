"""Adasum (op=ranktime.Adasum, hvd.Adasum) against a single-process reference of Horovod's
formula: pairwise, lower ranks' sum first, per tensor, a coefficient of 1 below sqrt(DBL_MIN);
fused tensors each with their own coefficients; what it refuses; its phases in the timeline."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ranktime
import ranktime.torch as hvd
from test_timeline import CLI, read_timeline, shared_path

SQRT_DBL_MIN = np.sqrt(sys.float_info.min)


def adasum_pair(a, b, dtype):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dot, anormsq, bnormsq = a64 @ b64, a64 @ a64, b64 @ b64
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= SQRT_DBL_MIN else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= SQRT_DBL_MIN else 1.0
    return (acoeff * a64 + bcoeff * b64).astype(dtype)


def adasum_reference(vectors, dtype):
    """Horovod's tree: (0,1), (2,3), ..., then those pairs' results pairwise, and so on."""
    level = [v.astype(dtype) for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(a, b, dtype) for a, b in zip(level[0::2], level[1::2])]
    return level[0]


def rank_vector(r, n, seed):
    return np.random.default_rng(seed * 1000 + r).normal(0, 1 + r, n)


TOLERANCE = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_matches_the_single_process_reference(dtype):
    size, rank = ranktime.size(), ranktime.rank()
    x = rank_vector(rank, 37, 1).astype(dtype)
    out = ranktime.allreduce(x, name="adasum." + dtype, op=ranktime.Adasum)
    expected = adasum_reference([rank_vector(r, 37, 1) for r in range(size)], dtype)
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                               rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    # Not a sum or an average of these (their norms differ by rank): Adasum's own result.
    total = sum(rank_vector(r, 37, 1) for r in range(size))
    assert not np.allclose(out.astype(np.float64), total, rtol=1e-2)
    assert not np.allclose(out.astype(np.float64), total / size, rtol=1e-2)
    # Every rank holds the same bits.
    gathered = ranktime.allgather(out.reshape(1, -1), name="adasum.same." + dtype)
    assert all(np.array_equal(row, gathered[0]) for row in gathered)


def test_parallel_vectors_average_and_orthogonal_ones_add():
    size, rank = ranktime.size(), ranktime.rank()
    parallel = np.linspace(1, 2, 8) * (rank + 1)
    np.testing.assert_allclose(ranktime.allreduce(parallel, name="adasum.par", op=ranktime.Adasum),
                               np.linspace(1, 2, 8) * (size + 1) / 2, rtol=1e-12)
    orthogonal = np.eye(size)[rank] * (rank + 1.5)
    np.testing.assert_allclose(ranktime.allreduce(orthogonal, name="adasum.orth",
                                                  op=ranktime.Adasum),
                               np.arange(size) + 1.5, rtol=1e-12)
    zeros = np.zeros(4)  # norms below sqrt(DBL_MIN): coefficients of 1, no division by zero
    assert np.array_equal(ranktime.allreduce(zeros, name="adasum.zero", op=ranktime.Adasum), zeros)


def test_fused_tensors_each_get_their_own_coefficients():
    size, rank = ranktime.size(), ranktime.rank()
    vectors = [rank_vector(rank, n, seed) for n, seed in [(5, 2), (11, 3), (1, 4)]]
    outs = ranktime.grouped_allreduce(vectors, name="adasum.group", op=ranktime.Adasum)
    for out, (n, seed) in zip(outs, [(5, 2), (11, 3), (1, 4)]):
        expected = adasum_reference([rank_vector(r, n, seed) for r in range(size)], "float64")
        np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_horovod_spellings_in_place_and_torch():
    size, rank = ranktime.size(), ranktime.rank()
    t = torch.from_numpy(rank_vector(rank, 9, 5).astype(np.float32))
    hvd.allreduce_(t, op=hvd.Adasum, name="adasum.torch")
    expected = adasum_reference([rank_vector(r, 9, 5) for r in range(size)], "float32")
    np.testing.assert_allclose(t.numpy(), expected, rtol=2e-6)
    assert hvd.Adasum is ranktime.Adasum


def test_what_adasum_refuses():
    with pytest.raises(ranktime.InvalidArgumentError, match="float16, bfloat16, float32 and "
                                                            "float64 tensors, not int32"):
        ranktime.allreduce(np.ones(3, np.int32), name="adasum.int", op=ranktime.Adasum)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.reducescatter(torch.ones(4), op=hvd.Adasum)
    if ranktime.size() > 2:
        subset = hvd.add_process_set([0, 1])
        try:
            with pytest.raises(NotImplementedError, match="non-global process sets"):
                hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=subset)
        finally:
            hvd.remove_process_set(subset)


def test_distributed_optimizer_combines_each_ranks_step():
    """Horovod's delta optimizer: w = w0 + adasum(each rank's SGD step), per parameter."""
    size, rank = ranktime.size(), ranktime.rank()
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.copy_(torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8)
        model.bias.copy_(torch.tensor([0.5, -0.5]))
    w0 = [p.detach().clone() for p in model.parameters()]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(), op=hvd.Adasum)

    def data(r):
        return torch.from_numpy(rank_vector(r, 12, 6).astype(np.float32)).reshape(3, 4)

    model(data(rank)).pow(2).sum().backward()
    optimizer.step()
    for p, start in zip(model.parameters(), w0):
        steps = []
        for r in range(size):  # each rank's SGD step from w0, on its own batch
            local = torch.nn.Linear(4, 2)
            with torch.no_grad():
                local.weight.copy_(w0[0])
                local.bias.copy_(w0[1])
            local(data(r)).pow(2).sum().backward()
            grad = dict(zip(["weight", "bias"], [local.weight.grad, local.bias.grad]))
            name = "weight" if p.dim() == 2 else "bias"
            steps.append((-0.1 * grad[name]).reshape(-1).numpy())
        expected = start.reshape(-1).numpy() + adasum_reference(steps, "float32")
        np.testing.assert_allclose(p.detach().reshape(-1).numpy(), expected, rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.skipif(not os.path.exists(CLI), reason="the ranktime CLI is not built")
def test_adasum_phases_in_the_timeline_pass_check():
    path = shared_path("adasum")
    with ranktime.timeline(path):
        ranktime.allreduce(np.ones(16, np.float32), name="adasum.tl", op=ranktime.Adasum)
        # A fused batch larger than a host allreduce's stage (RANKTIME_ALLREDUCE_CHUNK): Adasum
        # still takes it whole, and its levels are drawn as they ran, not summed as stages are.
        big = [np.ones(200_000, np.float32), np.ones(300_000, np.float32)]
        ranktime.grouped_allreduce(big, name="adasum.tl.fused", op=ranktime.Adasum)
    if ranktime.rank() == 0:
        events = read_timeline(path)
        names = [e.get("name") for e in events]
        levels = int(np.log2(ranktime.size()))
        # One exchange and one combine per level and operation, on every rank's lane.
        assert names.count("ADASUM_EXCHANGE") == 2 * levels * ranktime.size(), names
        assert names.count("ADASUM_COMBINE") == 2 * levels * ranktime.size()
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    ranktime.barrier()

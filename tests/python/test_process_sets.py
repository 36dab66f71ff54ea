"""Process sets and join from Python, as Horovod 0.28.1 has them (ranktime and ranktime.torch):
sets that overlap in time, every operation over a set exact (reducescatter, alltoall and the
grouped ones too, every dtype, their gradients against a single-process reference), the
ProcessSet API, errors naming the set and its ranks; join with uneven numbers of batches (exact
averages over every rank, through DistributedOptimizer too), reducescatter and alltoall refused
while a rank has joined; and the timeline of both, which `ranktime check` accepts, each set's
tensors labelled and ticked by its members only."""

import os
import subprocess

import numpy as np
import pytest
import torch
from torch import nn

import ranktime
import ranktime.torch as hvd
from conftest import FRAMEWORK_DTYPES, as_float64, assert_exactly, make
from test_ops import contribution, expected_reduction
from test_timeline import CLI, read_timeline, shared_path

torch.set_num_threads(1)


@pytest.fixture
def sets():
    """The sets every rank adds and removes (collectively): the even ranks, the odd ranks (a set
    of one at 2 and 3 ranks) and, from 3 ranks, ranks 0 and 1, which overlaps both."""
    n = ranktime.size()
    added = [hvd.add_process_set([r for r in range(n) if r % 2 == 0]),
             hvd.add_process_set(hvd.ProcessSet([r for r in range(n) if r % 2 == 1]))]
    if n >= 3:
        added.append(hvd.add_process_set([1, 0]))
    yield added
    for process_set in added:
        assert hvd.remove_process_set(process_set)


def mine(sets):
    return [s for s in sets if s.included()]


def test_process_set_objects(sets):
    n, r = ranktime.size(), ranktime.rank()
    even, odd = sets[:2]
    ids = [s.process_set_id for s in sets]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and 0 not in ids
    assert even.size() == (n + 1) // 2 and odd.size() == n // 2
    assert even.included() == (r % 2 == 0)
    assert (even if r % 2 == 0 else odd).rank() == r // 2
    with pytest.raises(ValueError, match="rank %d is not part of ProcessSet" % r):
        (odd if r % 2 == 0 else even).rank()
    assert str(even) == "ProcessSet(process_set_id=%d, ranks=%s, mpi_comm=None)" % (
        even.process_set_id, list(range(0, n, 2)))
    assert hvd.global_process_set.ranks == list(range(n))
    assert hvd.global_process_set.size() == n and hvd.global_process_set.rank() == r
    unadded = hvd.ProcessSet([1, 0])
    assert unadded.ranks == [0, 1] and unadded.size() is None and unadded.rank() is None
    with pytest.raises(ValueError, match="should be initialized with a list of process ranks"):
        hvd.ProcessSet([0, "1"])


@pytest.mark.parametrize("framework,dtype", [(f, d) for f, d in FRAMEWORK_DTYPES
                                             if d in ("int16", "int32", "float16", "float32",
                                                      "bfloat16", "float64")])
def test_every_operation_over_overlapping_sets_in_flight_at_once(sets, framework, dtype):
    r = ranktime.rank()
    handles = []
    for s in mine(sets):
        values = np.arange(6, dtype=np.float64) + r
        x = make(framework, values, dtype)
        rows = make(framework, np.full((1 + r % 2, 3), r), dtype)
        handles.append((s, "sum", ranktime.allreduce_async(x, "op", ranktime.Sum, process_set=s)))
        handles.append((s, "gather", ranktime.allgather_async(rows, "op", process_set=s)))
        handles.append((s, "bcast", ranktime.broadcast_async(x, s.ranks[-1], "op",
                                                             process_set=s)))
        y = make(framework, values, dtype)
        handles.append((s, "max_", (y, ranktime.allreduce_async_(y, "op_", ranktime.Max,
                                                                 process_set=s))))
    handles.append((None, "global", ranktime.allreduce_async(
        make(framework, np.ones(2), dtype), "op", ranktime.Sum)))
    for s, kind, handle in reversed(handles):  # waited for in another order than submitted
        if kind == "max_":
            tensor, handle = handle
            assert handle.wait() is tensor
            got = as_float64(tensor)
        else:
            got = as_float64(handle.wait())
        base = np.arange(6, dtype=np.float64)
        if kind == "global":
            np.testing.assert_array_equal(got, np.full(2, ranktime.size()))
        elif kind == "sum":
            np.testing.assert_array_equal(got, sum(base + q for q in s.ranks))
        elif kind == "max_":
            np.testing.assert_array_equal(got, base + max(s.ranks))
        elif kind == "bcast":
            np.testing.assert_array_equal(got, base + s.ranks[-1])
        else:
            want = np.concatenate([np.full((1 + q % 2, 3), q) for q in s.ranks])
            np.testing.assert_array_equal(got, want)
    for s in mine(sets):
        ranktime.barrier(process_set=s)


def split_rows(dim0, n):
    """Horovod's reducescatter split among n ranks: (first row, rows) of each."""
    return [(q * (dim0 // n) + min(q, dim0 % n), dim0 // n + (1 if q < dim0 % n else 0))
            for q in range(n)]


def sent(frm, to, rows):
    """What rank `frm` sends rank `to` in an alltoall: `rows` rows of 2 small integers."""
    return np.array([[(frm * 5 + to * 3 + k) % 11, k % 4] for k in range(rows)],
                    dtype=np.float64).reshape(rows, 2)


@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_reducescatter_alltoall_and_groups_over_overlapping_sets(sets, framework, dtype):
    """Every set's operations in flight at once with the same names; the split count is the
    set's size, ranks are the set's; results exact over the set's members."""
    r = ranktime.rank()
    other = "int32" if dtype == "float16" else "float16"
    work = []
    for s in mine(sets):
        n, me = s.size(), s.rank()
        dim0 = 2 * n + 1  # uneven unless n == 1
        ops = {op: ranktime.reducescatter_async(
            make(framework, contribution(r, op, dtype, (dim0, 3)), dtype), "rs." + op,
            getattr(ranktime, op), process_set=s) for op in ("Sum", "Average", "Max")}
        count = lambda frm, to: (frm + 2 * to) % 3  # noqa: E731 (by place in the set)
        x = make(framework, np.concatenate([sent(r, q, count(me, i))
                                            for i, q in enumerate(s.ranks)]), dtype)
        a2a = ranktime.alltoall_async(x, [count(me, i) for i in range(n)], "a2a", process_set=s)
        shapes, dtypes = [(n + 1, 2), (2 * n, 3)], [dtype, other]
        group = [make(framework, contribution(r, "Sum", d, sh), d) for d, sh in zip(dtypes, shapes)]
        g_sum = ranktime.grouped_allreduce_async(group, "g", ranktime.Sum, process_set=s)
        g_rs = ranktime.grouped_reducescatter_async(group, "g", ranktime.Sum, process_set=s)
        rows = [make(framework, np.full((me + t, 2), 10 * r + t), d) for t, d in enumerate(dtypes)]
        g_ag = ranktime.grouped_allgather_async(rows, "g", process_set=s)
        work.append((s, dim0, ops, count, a2a, shapes, dtypes, g_sum, g_rs, g_ag))
    for s, dim0, ops, count, a2a, shapes, dtypes, g_sum, g_rs, g_ag in reversed(work):
        n, me = s.size(), s.rank()
        first, rows_here = split_rows(dim0, n)[me]
        for op, handle in ops.items():
            want = expected_reduction(op, dtype, (dim0, 3), s.ranks)
            want = as_float64(make(framework, want, dtype))[first:first + rows_here]
            assert_exactly(handle.wait(), framework, dtype, want)
        output, received = a2a.wait()
        assert_exactly(output, framework, dtype,
                       np.concatenate([sent(q, r, count(i, me)) for i, q in enumerate(s.ranks)]))
        assert received.tolist() == [count(i, me) for i in range(n)]
        for t, d, sh in zip(g_sum.wait(), dtypes, shapes):
            assert_exactly(t, framework, d, expected_reduction("Sum", d, sh, s.ranks))
        for t, d, sh in zip(g_rs.wait(), dtypes, shapes):
            part_first, part_rows = split_rows(sh[0], n)[me]
            assert_exactly(t, framework, d, expected_reduction("Sum", d, sh, s.ranks)
                           [part_first:part_first + part_rows])
        for t, (g, d) in enumerate(zip(g_ag.wait(), dtypes)):
            assert_exactly(g, framework, d, np.concatenate(
                [np.full((i + t, 2), 10 * q + t) for i, q in enumerate(s.ranks)]))
    for s in mine(sets):
        ranktime.barrier(process_set=s)


def weights(q, shape):
    """Rank q's weights in its loss, (q + 1) * (index + 1) / 8."""
    return (torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape) + 1) * (q + 1) / 8


def test_gradients_of_reducescatter_alltoall_and_groups_over_a_set(sets):
    """Horovod's gradients, over the set: checked against one process computing the set's
    members' losses (reducescatter's is the set's size times the sum of its members' losses)."""
    r = ranktime.rank()
    for s in mine(sets):
        n, me = s.size(), s.rank()
        dim0 = 2 * n + 1
        x = (torch.arange(dim0 * 2, dtype=torch.float64).reshape(dim0, 2) + r).requires_grad_()
        y = hvd.reducescatter(x, op=hvd.Sum, name="grad.rs", process_set=s)
        (y * weights(r, y.shape)).sum().backward()
        xs = {q: (torch.arange(dim0 * 2, dtype=torch.float64).reshape(dim0, 2) + q)
              .requires_grad_() for q in s.ranks}
        total = sum(xs.values())
        (n * sum((total[f:f + k] * weights(q, (k, 2))).sum()
                 for q, (f, k) in zip(s.ranks, split_rows(dim0, n)))).backward()
        assert torch.equal(x.grad, xs[r].grad)

        count = lambda frm, to: 1 + (frm + to) % 2  # noqa: E731 (by place in the set)
        rows = sum(count(me, i) for i in range(n))
        a = (torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) + 10 * r).requires_grad_()
        out, _ = hvd.alltoall(a, torch.tensor([count(me, i) for i in range(n)]), name="grad.a2a",
                              process_set=s)
        (out * weights(r, out.shape)).sum().backward()
        refs = [(torch.arange(sum(count(i, j) for j in range(n)) * 2, dtype=torch.float64)
                 .reshape(-1, 2) + 10 * q).requires_grad_() for i, q in enumerate(s.ranks)]
        pieces = [torch.split(ref, [count(i, j) for j in range(n)]) for i, ref in enumerate(refs)]
        outputs = [torch.cat([pieces[i][j] for i in range(n)]) for j in range(n)]
        sum((o * weights(q, o.shape)).sum() for q, o in zip(s.ranks, outputs)).backward()
        assert torch.equal(a.grad, refs[me].grad)

        # grouped_allgather: Horovod's convention, the mean over the set of its members' losses.
        g = [torch.full((me + 1, 2), float(r), dtype=torch.float64, requires_grad=True)]
        gathered, = hvd.grouped_allgather(g, name="grad.g.ag", process_set=s)
        (gathered * weights(r, gathered.shape)).sum().backward()
        parts = [torch.full((i + 1, 2), float(q), dtype=torch.float64, requires_grad=True)
                 for i, q in enumerate(s.ranks)]
        everything = torch.cat(parts)
        (sum((everything * weights(q, everything.shape)).sum() for q in s.ranks) / n).backward()
        assert torch.allclose(g[0].grad, parts[me].grad, rtol=1e-15, atol=0)


def test_average_and_scale_divide_by_the_sets_size(sets):
    for s in mine(sets):
        x = torch.full((3,), 6.0 * (ranktime.rank() + 1))
        got = hvd.allreduce(x, name="avg", process_set=s, postscale_factor=0.5)
        want = sum(6.0 * (q + 1) for q in s.ranks) / len(s.ranks) * 0.5
        assert torch.equal(got, torch.full((3,), want))


def test_gradients_through_a_sets_collectives(sets):
    for s in mine(sets):
        x = torch.arange(4, dtype=torch.float64).requires_grad_()
        hvd.allreduce(x, name="g.ar", op=hvd.Sum, process_set=s).sum().backward()
        assert torch.equal(x.grad, torch.full((4,), float(s.size())))  # sum over the set's ranks
        rows = torch.ones(1 + s.rank(), 2, dtype=torch.float64, requires_grad=True)
        gathered = hvd.allgather(rows, name="g.ag", process_set=s)
        assert gathered.shape[0] == sum(1 + i for i in range(s.size()))
        (gathered * 3).sum().backward()
        assert torch.equal(rows.grad, torch.full_like(rows, 3.0))
        b = torch.ones(2, dtype=torch.float64, requires_grad=True)
        hvd.broadcast(b, s.ranks[0], name="g.bc", process_set=s).sum().backward()
        assert torch.equal(b.grad, torch.full((2,), 1.0 if ranktime.rank() == s.ranks[0] else 0))


def test_objects_and_sparse_over_a_set(sets):
    for s in mine(sets):
        got = hvd.broadcast_object({"from": ranktime.rank()}, root_rank=s.ranks[-1],
                                   name="obj", process_set=s)
        assert got == {"from": s.ranks[-1]}
        dense = torch.zeros(4, 2)
        dense[ranktime.rank() % 4, 1] = 1.0
        reduced = hvd.sparse_allreduce_async(dense.to_sparse(), name="sp", op=hvd.Average,
                                             process_set=s)()
        assert torch.equal(reduced.to_dense(),
                           sum(torch.zeros(4, 2).index_put_((torch.tensor([q % 4]),
                                                             torch.tensor([1])),
                                                            torch.tensor(1.0))
                               for q in s.ranks) / s.size())


def test_optimizer_over_a_set_reduces_there_only(sets):
    even = sets[0]
    torch.manual_seed(ranktime.rank())
    model = nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), process_set=even)
    model(torch.full((1, 3), float(ranktime.rank() + 1))).sum().backward()
    local = model.weight.grad.clone()
    opt.synchronize()
    if even.included():
        want = sum(torch.full((2, 3), float(q + 1)) for q in even.ranks) / even.size()
        assert torch.equal(model.weight.grad, want)
    else:
        assert torch.equal(model.weight.grad, local)
    with opt.skip_synchronize():
        opt.step()


def test_errors_name_the_set_and_its_ranks(sets):
    n, r = ranktime.size(), ranktime.rank()
    even, odd = sets[:2]
    other = odd if r % 2 == 0 else even
    x = np.ones(2, np.float32)
    with pytest.raises(ranktime.RanktimeError,
                       match=r"rank %d is not in process set %d \(ranks " % (r, other.process_set_id)):
        ranktime.allreduce(x, "not.mine", process_set=other)
    with pytest.raises(ranktime.RanktimeError, match="process set 99 does not exist"):
        ranktime.allreduce(x, "nowhere", process_set=99)
    if even.included():
        with pytest.raises(ranktime.RanktimeError,
                           match=r"root rank 1 is not in process set %d \(ranks %s\)"
                                 % (even.process_set_id, ",".join(map(str, even.ranks)))):
            ranktime.broadcast(x, 1, "root", process_set=even)
    with pytest.raises(ValueError, match="Attempted to add a duplicate process set"):
        hvd.add_process_set(list(reversed(even.ranks)))
    with pytest.raises(ValueError, match="duplicate process set"):
        hvd.add_process_set(list(range(n)))  # the global set's ranks
    with pytest.raises(ranktime.RanktimeError, match="rank %d is not a rank of this job" % n):
        hvd.add_process_set([0, n])
    assert not hvd.remove_process_set(hvd.global_process_set)
    assert not hvd.remove_process_set(hvd.ProcessSet([0]))  # never added
    with pytest.raises(ValueError, match="has not been added"):
        ranktime.allreduce(x, "unadded", process_set=hvd.ProcessSet([0]))


def test_a_removed_set_fails_its_work_in_flight():
    n, r = ranktime.size(), ranktime.rank()
    if n < 3:
        pytest.skip("a set of two ranks that is not every rank needs three")
    pair = hvd.add_process_set([0, 1])
    pending = None
    if r == 0:  # rank 1 never submits it
        pending = ranktime.allreduce_async(np.ones(3, np.float32), "orphan", process_set=pair)
    assert hvd.remove_process_set(pair)
    assert pair.process_set_id is None
    assert not hvd.remove_process_set(pair)
    if pending is not None:
        with pytest.raises(ranktime.RanktimeError,
                           match=r"process set \d+ \(ranks 0,1\) was removed while tensor "
                                 r"'allreduce.orphan \[process set \d+: ranks 0,1\]' was in "
                                 r"flight \(rank 1 had not submitted it\)"):
            pending.wait()
    with pytest.raises(ValueError, match="has not been added"):
        ranktime.allreduce(np.ones(1), "gone", process_set=pair)


def test_init_takes_process_sets():
    n = ranktime.size()
    first, last = hvd.ProcessSet([0]), hvd.ProcessSet([n - 1])
    hvd.init(process_sets=[first, last] if n > 1 else [first])
    assert first.process_set_id is not None and first.ranks == [0]
    again = hvd.ProcessSet([0])
    hvd.init(process_sets=[again])  # a second init finds the set
    assert again.process_set_id == first.process_set_id
    with pytest.raises(ValueError, match="entry number 1 is a duplicate"):
        hvd.init(process_sets=[hvd.ProcessSet([0]), hvd.ProcessSet([0])])
    hvd.init(process_sets="dynamic")
    for s in ([first, last] if n > 1 else [first]):
        assert hvd.remove_process_set(s)


# --- join ---------------------------------------------------------------------------------------

def test_join_with_uneven_batch_counts_is_exact():
    """Rank r has r + 2 batches; a joined rank adds zeros and an average divides by every rank,
    as in Horovod (so fewer ranks' data gives a smaller average)."""
    n, r = ranktime.size(), ranktime.rank()
    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    for batch in range(r + 2):
        opt.zero_grad()
        model(torch.full((1, 4), float(r + 1))).sum().backward()
        opt.step()
        active = [q for q in range(n) if batch < q + 2]
        want = sum(float(q + 1) for q in active) / n
        assert torch.equal(model.weight.grad, torch.full((1, 4), want)), (batch, active)
        ints = torch.full((3,), 7 * (r + 1), dtype=torch.int32)
        got = hvd.allreduce(ints, name="join.int", op=hvd.Average)
        assert torch.equal(got, torch.full((3,), sum(7 * (q + 1) for q in active) // n,
                                           dtype=torch.int32))
    assert hvd.join() == n - 1


@pytest.mark.parametrize("first_join_rank", [0, -1])
def test_join_as_horovods_tests_use_it(first_join_rank):
    """Horovod's test_horovod_join_{allreduce,allgather,broadcast}: the others' allreduce
    averages over every rank, their allgather and broadcast fail, join returns the same rank,
    not the first one, on every rank."""
    n, r = ranktime.size(), ranktime.rank()
    first = first_join_rank % n
    a = torch.arange(5, dtype=torch.float32) * (r + 1)
    if r == first:
        last = hvd.join()
    else:
        averaged = hvd.allreduce(a, name="join.a", average=True)
        want = sum(torch.arange(5, dtype=torch.float32) * (q + 1) for q in range(n) if q != first)
        assert torch.equal(averaged, want / n)
        with pytest.raises(RuntimeError, match="allgather is not supported while ranks have "
                                               r"joined \(rank %d called join\(\)\)" % first):
            hvd.allgather(a, name="join.g")
        with pytest.raises(RuntimeError, match="broadcast is not supported while ranks have"):
            hvd.broadcast(a, 1 if first == 0 else 0, name="join.b")
        with pytest.raises(RuntimeError, match="reducescatter is not supported while ranks have "
                                               r"joined \(rank %d called join\(\)\)" % first):
            hvd.reducescatter(torch.ones(2 * n), name="join.rs")
        with pytest.raises(RuntimeError, match="alltoall is not supported while ranks have"):
            hvd.alltoall(torch.ones(n), name="join.a2a")
        summed = hvd.grouped_allreduce([a, a[:2].to(torch.int32)], name="join.g", op=hvd.Sum)
        others = [q for q in range(n) if q != first]
        assert torch.equal(summed[0], sum(torch.arange(5.0) * (q + 1) for q in others))
        last = hvd.join()
    assert last != first
    assert hvd.allgather_object(last) == [last] * n


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="the ranktime CLI is not built")
def test_timeline_of_sets_and_join_passes_check(sets):
    n, r = ranktime.size(), ranktime.rank()
    path = shared_path("sets")
    with ranktime.timeline(path):
        for s in mine(sets):
            ranktime.allreduce(np.ones(4, np.float32), "tl.set", process_set=s)
            ranktime.reducescatter(np.ones((3, 2), np.float32), "tl.set", process_set=s)
            ranktime.alltoall(np.ones(s.size(), np.float32), name="tl.set", process_set=s)
            ranktime.grouped_allreduce([np.ones(2), np.ones(3)], "tl.set", process_set=s)
        for batch in range(r + 1):
            ranktime.allreduce(np.ones(4, np.float32), "tl.all")
        ranktime.join()
    if r == 0:
        events = read_timeline(path)
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        ticks = {}  # tensor name -> ranks that ticked it
        for e in events:
            if e.get("ph") == "X" and e.get("tid") == 0 and e["pid"] in names \
                    and e["name"].isdigit():
                ticks.setdefault(names[e["pid"]], set()).add(int(e["name"]))
        for s in sets:  # at most 2 ranks each: no ranges in the label
            for kind, operation in [("allreduce.tl.set", "ALLREDUCE"),
                                    ("reducescatter.tl.set", "REDUCESCATTER"),
                                    ("alltoall.tl.set", "ALLTOALL"),
                                    ("grouped_allreduce.tl.set_2of2", "ALLREDUCE")]:
                label = "%s [process set %d: ranks %s]" % (
                    kind, s.process_set_id, ",".join(map(str, s.ranks)))
                assert ticks[label] == set(s.ranks), (label, ticks)
                lanes = {e["tid"] - 1 for e in events if e.get("ph") == "X"
                         and e.get("tid", 0) > 0 and e["name"] == operation
                         and names.get(e["pid"]) == label}
                assert lanes == set(s.ranks), (label, lanes)
        assert ticks["allreduce.tl.all"] == set(range(n))
        assert ticks["ranktime.join"] == set(range(n))
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    ranktime.barrier()

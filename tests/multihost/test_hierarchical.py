"""The host-aware allreduce (`--hierarchical-allreduce`) across emulated hosts: every operation x
dtype exact, fused and unfused, on uneven hosts (3 + 1 ranks) and even ones (2 + 2), with the
default chunks (4 MiB) and small ones (many chunks in the pipeline at once); its stages in
the timeline: MPI_REDUCE inside a host on every rank, MPI_ALLREDUCE among the hosts' first ranks
only, MPI_BCAST inside a host on every rank."""
import json
import os
from collections import defaultdict

import pytest

from conftest import check_trace, ranktime_run, run_metadata

COLLECTIVES_TEST = os.environ.get("RANKTIME_COLLECTIVES_TEST")


def sub_phases_by_rank(trace):
    """{rank: set of sub-phase names} from the rank lanes' slices (pid = tensor, tid = rank)."""
    events = json.loads(open(trace).read())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    found = defaultdict(set)
    for e in events:
        lane = threads.get((e.get("pid"), e.get("tid")), "")
        if e.get("ph") in ("X", "B") and lane.startswith("rank "):
            found[int(lane.split()[1])].add(e["name"])
    return found


@pytest.mark.skipif(COLLECTIVES_TEST is None, reason="RANKTIME_COLLECTIVES_TEST not set")
@pytest.mark.parametrize("placement, leaders, fusion", [
    ("h0:3,h1:1", {0, 3}, []),
    ("h0:3,h1:1", {0, 3}, ["--fusion-threshold-mb", "0"]),
    ("h0:2,h1:2", {0, 2}, []),
    # 64 KiB chunks: every 70,001-element tensor in several, fused buffers in hundreds, all
    # pipelined through the three stages.
    ("h0:2,h1:2", {0, 2}, ["--mpi-arg=-x", "--mpi-arg=RANKTIME_ALLREDUCE_CHUNK=65536"]),
], ids=["uneven_fused", "uneven_unfused", "even_fused", "even_fused_small_chunks"])
def test_every_op_and_dtype_exact_and_the_stages_in_the_timeline(cluster, tmp_path, placement,
                                                                   leaders, fusion):
    trace = tmp_path / "t.json"
    p = ranktime_run(cluster, 4, [COLLECTIVES_TEST], "--hierarchical-allreduce",
                     "--timeline-filename", trace, *fusion, placement=["-H", placement],
                     cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "FAILED" not in p.stdout, p.stdout[-3000:]
    check_trace(trace, closed_cleanly=False)
    # The default is collective/src/core/settings.cc's.
    chunk = next((a.rsplit("=", 1)[1] for a in fusion if "RANKTIME_ALLREDUCE_CHUNK=" in a), "524288")
    assert run_metadata(trace)["config"]["RANKTIME_ALLREDUCE_CHUNK"] == chunk
    phases = sub_phases_by_rank(trace)
    for rank in range(4):
        assert {"MPI_REDUCE", "MPI_BCAST"} <= phases[rank], (rank, phases[rank])
        assert ("MPI_ALLREDUCE" in phases[rank]) == (rank in leaders), (rank, phases[rank])

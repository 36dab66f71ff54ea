"""Training jobs across emulated hosts with `ranktime run -H`: results verified, timeline on, the
trace valid and naming every rank's host."""
from pathlib import Path

import pytest

from conftest import CLI, SYNTH, WORKLOADS, check_trace, ranktime_run, run_metadata


@pytest.mark.cluster(hosts=2, slots=2)
def test_resnet50_on_two_hosts_of_two_ranks(cluster, tmp_path):
    p = ranktime_run(cluster, 4, [SYNTH, "--workload", WORKLOADS / "resnet50.tsv", "--steps", "2",
                                  "--warmup", "0", "--quiet"],
                     "--timeline-filename", tmp_path / "t.json", "--verbose", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks=4 tensors=161 " in p.stdout and "verify=ok" in p.stdout, p.stdout
    # More than one host named: `ranktime run` sets mpirun's keepalive by itself.
    assert "--mca oob_tcp_keepalive_time 5" in p.stderr, p.stderr
    check_trace(tmp_path / "t.json")
    assert run_metadata(tmp_path / "t.json")["hostnames"] == ["h0", "h0", "h1", "h1"]


PLACEMENT = """
import ranktime
ranktime.init()
print("placement", ranktime.rank(), ranktime.local_rank(), ranktime.local_size(),
      ranktime.cross_rank(), ranktime.cross_size(), flush=True)
ranktime.shutdown()
"""


@pytest.mark.parametrize("hosts, expected", [
    # rank: (local_rank, local_size, cross_rank, cross_size)
    ("h0:2,h1:2", {0: (0, 2, 0, 2), 1: (1, 2, 0, 2), 2: (0, 2, 1, 2), 3: (1, 2, 1, 2)}),
    ("h0:3,h1:1", {0: (0, 3, 0, 2), 1: (1, 3, 0, 1), 2: (2, 3, 0, 1), 3: (0, 1, 1, 2)}),
], ids=["2+2", "3+1"])
def test_placement_from_the_hosts(cluster, tmp_path, hosts, expected):
    """The API's placement, and the run metadata's, are the hosts' (as -H placed the ranks)."""
    script = tmp_path / "placement.py"
    script.write_text(PLACEMENT)
    python_dir = Path(CLI).parent / "python"
    if not (python_dir / "ranktime").is_dir():
        pytest.skip(f"the Python module is not built in {python_dir.parent}")
    trace = tmp_path / "t.json"
    p = ranktime_run(cluster, 4, ["/usr/bin/python3", script],
                     "--mpi-arg=-x", f"--mpi-arg=PYTHONPATH={python_dir}",
                     "--timeline-filename", trace, placement=["-H", hosts], cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = {}
    for line in p.stdout.splitlines():
        if line.startswith("placement "):
            rank, *rest = map(int, line.split()[1:])
            seen[rank] = tuple(rest)
    assert seen == expected, p.stdout

    meta = run_metadata(trace)
    assert meta["hostnames"] == [h for h, n in (x.split(":") for x in hosts.split(","))
                                 for _ in range(int(n))], meta
    in_metadata = {rank: tuple(meta[field][rank] for field in
                               ("local_ranks", "local_sizes", "cross_ranks", "cross_sizes"))
                   for rank in range(4)}
    assert in_metadata == expected, meta
    # Each rank's clock offset and its uncertainty (multihost.clocks checks their values).
    assert len(meta["clock_offsets_us"]) == len(meta["clock_uncertainty_us"]) == 4, meta
    assert meta["clock_offsets_us"][0] == 0 and all(u >= 0 for u in meta["clock_uncertainty_us"])

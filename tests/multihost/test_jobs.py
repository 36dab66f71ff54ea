"""Training jobs across emulated hosts with `ranktime run -H`: results verified, timeline on, the
trace valid and naming every rank's host."""
import subprocess

import pytest

from conftest import CLI, SYNTH, WORKLOADS, ranktime_run, run_metadata


def check_trace(trace):
    p = subprocess.run([CLI, "check", str(trace)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "closed cleanly" in p.stdout, p.stdout


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

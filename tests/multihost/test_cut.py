"""A host's link cut mid-run ends the job in bounded time: ResNet-50 on 2 hosts x 2 ranks, h1's
cable pulled during the run. ranktime's peer timeout (5 s here, shorter than mpirun's keepalive,
so ranktime notices first) names the silent host's ranks, rank 0 closes its trace with a PEER_LOST
instant, the job is aborted, and `ranktime run` returns non-zero well within 45 s of the cut even
though mpirun's order to the unreachable host waits in a TCP retransmission (ranktime run stops
mpirun itself). After healing, nothing of the job is left on either host and a new job runs."""
import json
import subprocess
import time

from conftest import CLI, ENV, SYNTH, WORKLOADS, check_trace, ranktime_run, wait_until

BOUND_S = 45


def test_a_cut_link_ends_the_job_in_bounded_time(cluster, tmp_path):
    trace = tmp_path / "t.json"
    args = [CLI, "run", "-np", "4", "-H", cluster.host_list(), *cluster.ranktime_args(),
            "--peer-timeout-seconds", "5", "--timeline-filename", str(trace), "--",
            SYNTH, "--workload", str(WORKLOADS / "resnet50.tsv"), "--steps", "100000"]
    job = cluster.popen(args, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    try:
        # Cut once the job is training (its first step printed).
        for line in job.stdout:
            if line.startswith("step "):
                break
        cluster.cut("h1")
        cut_at = time.monotonic()
        out, err = job.communicate(timeout=BOUND_S + 60)
        took = time.monotonic() - cut_at
    finally:
        if job.poll() is None:
            job.kill()
    print(f"ranktime run returned {job.returncode} {took:.1f} s after the cut")
    assert job.returncode != 0, out + err
    assert took <= BOUND_S, (took, err[-3000:])
    # Rank 0 names the silent host's ranks; ranktime run says why the job was aborted.
    assert "rank 2 (host h1" in err and "rank 3 (host h1" in err, err[-3000:]
    assert "ranktime run: the job was aborted" in err, err[-3000:]
    # Rank 0's trace is complete and valid, with the PEER_LOST instant.
    events = json.loads(trace.read_text())
    assert any(e.get("name") == "PEER_LOST" for e in events)
    check_trace(trace, closed_cleanly=False)

    # Nothing of the job is left on h0; once healed, h1's daemon learns mpirun is gone.
    assert wait_until(lambda: not cluster.host_processes("h0"), 60), cluster.host_processes("h0")
    cluster.heal("h1")
    assert wait_until(lambda: not cluster.host_processes("h1"), 60), cluster.host_processes("h1")
    p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "4", "--steps", "2", "--quiet"],
                     cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr

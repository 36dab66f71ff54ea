"""Link faults mid-run end the job in bounded time: ResNet-50 on 2 hosts x 2 ranks, then
- h1's cable pulled: ranktime's peer timeout (5 s here, shorter than mpirun's keepalive, so
  ranktime notices first) names the silent host and its ranks, rank 0 closes its trace with a
  PEER_LOST instant, the job is aborted, and `ranktime run` returns non-zero well within 45 s of the
  cut even though mpirun's order to the unreachable host waits in a TCP retransmission (ranktime
  run stops mpirun itself);
- every rank of h1 killed: mpirun ends the job by itself (SIGTERM to the survivors) and names a
  killed rank and its host; with `--enable-recovery` mpirun lets the job run on, and ranktime's
  peer timeout names h1 and its ranks as above;
- rank 0's host h0 cut: rank 0 gives up on h1 on its side (its trace says so), h1's ranks give up on
  a silent rank 0 and name its host, and the job ends as above.
After each, nothing of the job is left on either host (a cut host's Open MPI daemon leaves once
the link is back) and a new job runs."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import CLI, ENV, SYNTH, WORKLOADS, check_trace, ranktime_run, wait_until

BOUND_S = 45
PEER_TIMEOUT = ["--peer-timeout-seconds", "5"]
H1_LOST = "host h1 (ranks 2, 3) cannot be reached, or every rank on it died or hangs"
# What a rank says when the loss caught it inside a data collective with the lost ranks: it cannot
# hear rank 0's verdict there, and its own watchdog ends the wait (seen once in CI's timing).
STUCK_IN_COLLECTIVE = re.compile(r"has not returned after [\d.]+ s \(RANKTIME_PEER_TIMEOUT_S="
                                 r"[\d.]+\): another rank probably died or hangs")


def train_until(cluster, tmp_path, fault, *run_args):
    """Starts ResNet-50 on h0:2,h1:2 with the timeline on, runs `fault()` once the first step is
    printed, and returns (exit status, stdout, stderr, seconds from the fault to the exit)."""
    args = [CLI, "run", "-np", "4", "-H", cluster.host_list(), *cluster.ranktime_args(),
            *run_args, "--timeline-filename", tmp_path / "t.json", "--",
            SYNTH, "--workload", WORKLOADS / "resnet50.tsv", "--steps", "100000"]
    job = cluster.popen(list(map(str, args)), env=ENV, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    try:
        for line in job.stdout:
            if line.startswith("step "):
                break
        fault()
        fault_at = time.monotonic()
        out, err = job.communicate(timeout=BOUND_S + 60)
        took = time.monotonic() - fault_at
    finally:
        if job.poll() is None:
            job.kill()
    print(f"ranktime run returned {job.returncode} {took:.1f} s after the fault")
    return job.returncode, out, err, took


def ranks_reporting(err, text):
    """The ranks with an error line that contains `text` (a string, or a compiled pattern that
    matches in it; ranktime-synth prints one per failed tensor; mpirun may interleave other
    ranks' output inside a line, so one intact line is enough)."""
    pattern = re.compile(r"^ranktime-synth rank (\d+): (.*)$", re.M)
    found = (lambda line: text.search(line)) if isinstance(text, re.Pattern) else \
        (lambda line: text in line)
    return {int(m.group(1)) for m in pattern.finditer(err) if found(m.group(2))}


def h0_rank_1_reports_the_loss(err):
    """Rank 1 (h0, not rank 0) fails its tensors naming h1, as rank 0 told it; or, when h1's
    ranks went while rank 1 was inside a collective with them, naming that collective's wait."""
    return 1 in ranks_reporting(err, H1_LOST) | ranks_reporting(err, STUCK_IN_COLLECTIVE)


def job_ranks(cluster, host):
    """The job's rank processes on `host` (its Open MPI daemon aside)."""
    found = {}
    for pid in cluster.host_processes(host):
        try:
            if SYNTH in Path(f"/proc/{pid}/cmdline").read_text():
                found[pid] = host
        except OSError:
            pass
    return found


def trace_instants(trace, name):
    return [e["args"]["message"] for e in json.loads(Path(trace).read_text())
            if e.get("name") == name]


def rank0_lost_h1(trace):
    """Rank 0's trace is complete and valid, with a PEER_LOST instant that names h1's ranks."""
    assert any(H1_LOST in m for m in trace_instants(trace, "PEER_LOST"))
    check_trace(trace)


def ends_and_heals(cluster, tmp_path, cut, other):
    """After `cut` was cut: nothing of the job is left on `other`, no rank on `cut` (its daemon
    waits for the link: its connection to mpirun is in a TCP retransmission); once healed, the
    daemon learns mpirun is gone and nothing is left there either, and a new job runs."""
    assert wait_until(lambda: not cluster.host_processes(other), 60), \
        cluster.host_processes(other)
    assert wait_until(lambda: not job_ranks(cluster, cut), 60), job_ranks(cluster, cut)
    cluster.heal(cut)
    assert wait_until(lambda: not cluster.host_processes(cut), 60), cluster.host_processes(cut)
    runs_again(cluster, tmp_path)


def runs_again(cluster, tmp_path):
    p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "4", "--steps", "2", "--quiet"],
                     cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_cut_link_ends_the_job_in_bounded_time(cluster, tmp_path):
    rc, out, err, took = train_until(cluster, tmp_path, lambda: cluster.cut("h1"), *PEER_TIMEOUT)
    assert rc != 0, out + err
    assert took <= BOUND_S, (took, err[-3000:])
    # Rank 0 names the silent host and its ranks, and so does every error on the ranks that can
    # still run (h0's); ranktime run says why the job was aborted.
    assert "[ranktime 0] error: rank 2 (host h1, pid" in err and H1_LOST in err, err[-3000:]
    assert h0_rank_1_reports_the_loss(err), err[-3000:]
    assert "ranktime run: the job was aborted" in err, err[-3000:]
    rank0_lost_h1(tmp_path / "t.json")
    ends_and_heals(cluster, tmp_path, cut="h1", other="h0")


def kill_every_rank_of(cluster, host):
    def kill():
        ranks = job_ranks(cluster, host)
        assert len(ranks) == 2, ranks
        for pid in ranks:
            os.kill(pid, signal.SIGKILL)
    return kill


def test_every_rank_of_one_host_killed_mpirun_ends_the_job(cluster, tmp_path):
    rc, out, err, took = train_until(cluster, tmp_path, kill_every_rank_of(cluster, "h1"),
                                     *PEER_TIMEOUT)
    assert rc != 0, out + err
    assert took <= BOUND_S, (took, err[-3000:])
    # mpirun names the first killed rank it saw and its host, and stops the others with SIGTERM,
    # which fails their operations with a message that says so.
    assert re.search(r"mpirun noticed that process rank [23] with PID \d+ on node h1 exited on "
                     r"signal 9", err), err[-3000:]
    assert ranks_reporting(err, "this process received SIGTERM and is ending") == {0, 1}, \
        err[-3000:]
    # That came first: ranktime's peer timeout never fired.
    assert "has sent nothing" not in err, err[-3000:]
    assert trace_instants(tmp_path / "t.json", "SIGTERM"), "no SIGTERM instant"
    check_trace(tmp_path / "t.json")
    assert wait_until(lambda: not cluster.host_processes(), 60), cluster.host_processes()
    runs_again(cluster, tmp_path)


def test_every_rank_of_one_host_killed_with_recovery_ranktime_names_the_host(cluster, tmp_path):
    # --enable-recovery: mpirun lets the job run on when a rank dies; ranktime's peer timeout
    # finds both of h1's ranks silent and names them and their host.
    rc, out, err, took = train_until(cluster, tmp_path, kill_every_rank_of(cluster, "h1"),
                                     *PEER_TIMEOUT, "--mpi-arg=--enable-recovery")
    assert rc != 0, out + err
    assert took <= BOUND_S, (took, err[-3000:])
    assert h0_rank_1_reports_the_loss(err), err[-3000:]
    assert "ranktime run: the job was aborted" in err and H1_LOST in err, err[-3000:]
    rank0_lost_h1(tmp_path / "t.json")
    assert wait_until(lambda: not cluster.host_processes(), 60), cluster.host_processes()
    runs_again(cluster, tmp_path)


def test_rank0s_host_cut_the_other_host_gives_up_on_rank0(cluster, tmp_path):
    rc, out, err, took = train_until(cluster, tmp_path, lambda: cluster.cut("h0"), *PEER_TIMEOUT)
    assert rc != 0, out + err
    assert took <= BOUND_S, (took, err[-3000:])
    # What reaches the user is h1's side (h0's output would cross the cut link): each of h1's
    # ranks gives up on a silent rank 0 and names its host, or, stuck inside a collective with
    # h0's ranks, says the collective has not returned.
    silent_rank0 = "rank 0 (host h0, pid "
    named = ranks_reporting(err, silent_rank0) | ranks_reporting(err, "has not returned after")
    assert named == {2, 3}, err[-3000:]
    assert ranks_reporting(err, silent_rank0), err[-3000:]
    assert "or host h0 cannot be reached" in err, err[-3000:]
    assert "ranktime run: the job was aborted" in err, err[-3000:]
    # Rank 0 carries on on its side: it gives up on h1's ranks (its trace is here on a file
    # system every host shares).
    rank0_lost_h1(tmp_path / "t.json")
    ends_and_heals(cluster, tmp_path, cut="h0", other="h1")

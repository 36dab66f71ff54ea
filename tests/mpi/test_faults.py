"""Fault injection under mpirun: stalls, a slow rank, a rank that exits early, a rank killed.

Each case runs tests/mpi/fault_injection (see its header) with 2 and 4 ranks and checks what the
user sees: the messages, the exit status, and that nothing hangs (every job has a timeout far
above its expected duration; a hang fails the test rather than blocking CI).
"""
import json
import os
import subprocess

import pytest

MPIRUN = os.environ.get("MPIRUN", "mpirun")
FAULT = os.environ["FAULT_INJECTION_BIN"]
CLI = os.environ.get("RANKTIME_CLI", "")
RANKS = [2, 4]


def run(ranks, mode, env=None, timeout=120, mpirun_args=(), args=()):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    cmd += list(mpirun_args)
    for k, v in (env or {}).items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [FAULT, mode] + [str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def errors_by_rank(stdout):
    """{rank: [message, ...]} from fault_injection's "ERROR: <message> [rank R]" lines."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("ERROR: ") and line.endswith("]") and " [rank " in line:
            message, rank = line[len("ERROR: "):].rsplit(" [rank ", 1)
            found.setdefault(int(rank[:-1]), []).append(message)
    return found


def load_trace(trace):
    """The events of `trace`, repaired first with `ranktime check --repair` if it was cut short."""
    text = trace.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        assert CLI and os.path.exists(CLI), "timeline not valid JSON and no ranktime CLI to repair it"
        subprocess.run([CLI, "check", "--repair", str(trace)], check=False, capture_output=True)
        return json.loads(trace.read_text())


@pytest.mark.parametrize("ranks", RANKS)
def test_stall_warning_names_missing_rank_and_tensor(ranks):
    p = run(ranks, "stall-recover", {"RANKTIME_STALL_WARNING_S": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stall: rank 1 did not submit 'stall.b'" in p.stderr, p.stderr


@pytest.mark.parametrize("ranks", RANKS)
def test_a_live_rank_that_submits_late_is_not_taken_for_dead(ranks):
    # Rank 1's program sleeps 3 s, three times the peer timeout: its background thread keeps
    # sending heartbeats, so nobody gives up on it.
    p = run(ranks, "stall-recover", {"RANKTIME_PEER_TIMEOUT_S": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "has sent nothing" not in p.stderr and "ERROR" not in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("ranks", RANKS)
def test_stall_shutdown_fails_every_rank(ranks):
    p = run(ranks, "stall-shutdown", {"RANKTIME_STALL_WARNING_S": "1", "RANKTIME_STALL_SHUTDOWN_S": "2"}, timeout=60)
    # Every rank reached its exit after the shutdown (rank 1 was only waiting in a collective),
    # so the job ended normally with the programs' own status: 3, failures reported, not the
    # abort's 13.
    assert p.returncode == 3, p.stdout + p.stderr
    assert "unless every rank reaches its exit first" in p.stderr, p.stderr
    errors = [l for l in p.stdout.splitlines() if l.startswith("ERROR:")]
    # Every rank reports the stall: ranks 0, 2, 3 on stall.b, rank 1 on stall.c. Both tensors
    # are stalled (rank 1 never submits stall.b, the others never stall.c); the message names
    # the one that became ready first, which is stall.b unless rank 1 got there first (a loaded
    # machine), and then every rank but 1 is missing from stall.c.
    assert len(errors) == ranks, p.stdout + p.stderr
    others = ",".join(str(r) for r in range(ranks) if r != 1)
    missing_c = f"rank{'s' if ranks > 2 else ''} {others} did not submit 'stall.c'"
    for e in errors:
        assert "stalled for more than RANKTIME_STALL_SHUTDOWN_S" in e, e
        assert "rank 1 did not submit 'stall.b'" in e or missing_c in e, e


@pytest.mark.parametrize("ranks", RANKS)
def test_slow_rank_named_by_warning_and_lateness(ranks):
    p = run(ranks, "slow", {"RANKTIME_STRAGGLER_THRESHOLD_MS": "5"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SLOWEST 1" in p.stdout, p.stdout
    assert "straggler: rank 1 on host" in p.stderr, p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith("LATENESS rank=1 "))
    median_ms = float(line.split("median_ms=")[1].split()[0])
    # The delay is 15 ms of sleep; scheduling on an oversubscribed host only adds to it.
    assert 12.0 <= median_ms <= 40.0, line
    # What it cost, replayed live with rank 0's batch times: each step waits for its sleep (the
    # batches after it take well under a millisecond), so about the sleep a step, and nobody
    # else costs a step a sizeable part of that.
    cost_ms = float(line.split("cost_per_step_ms=")[1].split()[0])
    assert 10.0 <= cost_ms <= 40.0, line
    others = [l for l in p.stdout.splitlines() if l.startswith("LATENESS ") and l != line]
    assert all(float(l.split("cost_per_step_ms=")[1].split()[0]) < cost_ms / 2 for l in others)
    assert "ms per step (what-if replay)" in p.stderr, p.stderr


@pytest.mark.parametrize("ranks", RANKS)
def test_rank_exiting_without_shutdown_fails_the_others(ranks):
    p = run(ranks, "exit-early", timeout=60)
    errors = [l for l in p.stdout.splitlines() if l.startswith("ERROR:")]
    assert errors, p.stdout + p.stderr
    assert all("rank 1 exited without calling ranktime::shutdown()" in e for e in errors), errors
    assert p.returncode != 0


@pytest.mark.parametrize("ranks", RANKS)
def test_sigkill_of_one_rank_ends_the_job_and_keeps_the_timeline(ranks, tmp_path):
    trace = tmp_path / "kill.json"
    p = run(ranks, "kill", {"TIMELINE_FILENAME": str(trace)}, timeout=90)
    assert p.returncode != 0  # mpirun reports the killed rank and ends the job: no hang
    # mpirun ends the survivors with SIGTERM: each says so, with what it was waiting for.
    assert "received SIGTERM with" in p.stderr, p.stderr
    assert "operation(s) pending" in p.stderr, p.stderr
    # ... and fails what the program was waiting for, so that it reports an error, not a hang.
    # (A survivor may die before its main thread prints: at least one does, within the linger.)
    errors = errors_by_rank(p.stdout)
    assert errors and 1 not in errors, p.stdout
    for messages in errors.values():
        # Its own signal, or another survivor's shutdown that the signal caused.
        assert all("this process received SIGTERM and is ending" in m or
                   "received SIGTERM and is ending; tensor" in m for m in messages), messages
    events = load_trace(trace)
    assert any(e.get("name") == "ranktime_run" for e in events)
    if any(e.get("name") == "ranktime_run_end" for e in events):
        # Rank 0 closed the file itself: the signal is in it, with what was pending.
        marks = [e for e in events if e.get("ph") == "i" and e.get("name") == "SIGTERM"]
        assert len(marks) == 1, marks
        assert "operation(s) pending" in marks[0]["args"]["message"]
    if CLI and os.path.exists(CLI):
        c = subprocess.run([CLI, "check", str(trace)], capture_output=True, text=True)
        assert c.returncode == 0, c.stdout + c.stderr


# With mpirun --enable-recovery, Open MPI lets the job run on after a rank dies: ranktime itself
# must notice (heartbeats, and a watchdog on collectives) and fail everything within
# RANKTIME_PEER_TIMEOUT_S instead of hanging. The subprocess timeout is the hang detector.
DEAD_RANK_CASES = [
    ("kill", 1, "PEER_LOST"),               # between operations: rank 0 hears nothing from rank 1
    ("kill", 0, None),                      # rank 0 dies: the others hear nothing from it
    ("kill-in-collective", 1, "PEER_TIMEOUT"),  # inside a 32 MiB allreduce: the watchdog
]


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("mode,victim,mark", DEAD_RANK_CASES)
def test_dead_rank_fails_the_others_within_the_peer_timeout(ranks, mode, victim, mark, tmp_path):
    trace = tmp_path / "dead.json"
    p = run(ranks, mode, {"RANKTIME_PEER_TIMEOUT_S": "3", "TIMELINE_FILENAME": str(trace)},
            timeout=120, mpirun_args=["--enable-recovery"], args=[victim])
    errors = errors_by_rank(p.stdout)
    survivors = set(range(ranks)) - {victim}
    assert set(errors) == survivors, p.stdout + p.stderr
    for rank, messages in errors.items():
        for m in messages:
            assert "(RANKTIME_PEER_TIMEOUT_S=3.0)" in m, m
            if victim == 0:
                assert ("rank 0 (host " in m and "has sent nothing for" in m
                        or "has not returned after" in m), m
            elif mode == "kill":
                assert f"rank {victim} (host " in m and "it died or hangs" in m, m
        # Operations submitted after the failure fail at once, with the same reason.
        assert any("was not submitted" in m for m in messages), messages
    events = load_trace(trace)
    assert any(e.get("name") == "ranktime_run" for e in events)
    if victim != 0:
        # Rank 0 survived: its file is complete and says what happened.
        assert any(e.get("name") == "ranktime_run_end" for e in events)
        marks = [e for e in events if e.get("ph") == "i" and e.get("name") in ("PEER_LOST", "PEER_TIMEOUT")]
        assert len(marks) == 1, marks
        message = marks[0]["args"]["message"]
        assert "RANKTIME_PEER_TIMEOUT_S=3.0" in message, message
        if mode == "kill":
            assert marks[0]["name"] == mark and f"rank {victim} (host " in message, message


# One rank's own part of a response fails (RANKTIME_TEST_FAIL_LOCAL injects a failed copy): it
# still takes part in the collective, and the outcome agreement fails that response on every rank
# instead of handing the others a result that rank cannot vouch for.
@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("target", ["agree.single", "agree.fused.2"])
def test_a_local_failure_on_one_rank_fails_the_response_on_every_rank(ranks, target):
    p = run(ranks, "fail-local", {"RANKTIME_TEST_FAIL_LOCAL": f"1:{target}"}, timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr  # failures reported, the job not aborted
    errors = errors_by_rank(p.stdout)
    assert set(errors) == set(range(ranks)), p.stdout + p.stderr
    for rank, messages in errors.items():
        for m in messages:
            if rank == 1:
                assert "injected by RANKTIME_TEST_FAIL_LOCAL" in m, m
            else:
                assert "rank 1's part of this collective failed" in m, m
    failed = {}
    for line in p.stdout.splitlines():
        if line.startswith("FAILED "):
            name, rank = line.split()[1], int(line.split()[-1][:-1])
            failed.setdefault(rank, set()).add(name)
    # Every rank failed the same tensors: the target, and whatever was fused with it.
    assert target in failed[1], failed
    assert all(names == failed[1] for names in failed.values()), failed
    oks = [l.split() for l in p.stdout.splitlines() if l.startswith("OK ")]
    assert {(o[1], int(o[-1][:-1])) for o in oks if o[1] == "agree.after"} == \
        {("agree.after", r) for r in range(ranks)}, p.stdout
    for o in oks:
        assert float(o[2]) == ranks, o  # every result a rank returned is right

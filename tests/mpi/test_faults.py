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


def run(ranks, mode, env=None, timeout=120):
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    for k, v in (env or {}).items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [FAULT, mode]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("ranks", RANKS)
def test_stall_warning_names_missing_rank_and_tensor(ranks):
    p = run(ranks, "stall-recover", {"RANKTIME_STALL_WARNING_S": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stall: rank 1 did not submit 'stall.b'" in p.stderr, p.stderr


@pytest.mark.parametrize("ranks", RANKS)
def test_stall_shutdown_fails_every_rank(ranks):
    p = run(ranks, "stall-shutdown", {"RANKTIME_STALL_WARNING_S": "1", "RANKTIME_STALL_SHUTDOWN_S": "2"}, timeout=60)
    assert p.returncode != 0
    errors = [l for l in p.stdout.splitlines() if l.startswith("ERROR:")]
    # Every rank reports the stall: ranks 0, 2, 3 on stall.b, rank 1 on stall.c.
    assert len(errors) == ranks, p.stdout + p.stderr
    for e in errors:
        assert "stalled for more than RANKTIME_STALL_SHUTDOWN_S" in e, e
        assert "rank 1 did not submit 'stall.b'" in e, e


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
    text = trace.read_text()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
        assert CLI and os.path.exists(CLI), "timeline not valid JSON and no ranktime CLI to repair it"
        subprocess.run([CLI, "check", "--repair", str(trace)], check=False, capture_output=True)
        events = json.loads(trace.read_text())
    assert any(e.get("name") == "ranktime_run" for e in events)
    if CLI and os.path.exists(CLI):
        c = subprocess.run([CLI, "check", str(trace)], capture_output=True, text=True)
        assert c.returncode == 0, c.stdout + c.stderr

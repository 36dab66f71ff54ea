"""A doomed job ends: one rank is stuck in its own code, the stall shutdown fails the others, and
then the whole job must end within a bound (issue 21), through `ranktime run`, for C++
(fault_injection stuck-*) and Python (stuck_program.py) programs.

What is checked: a non-zero exit status well before the stuck rank would come back (two minutes),
every responsive rank's error names the stuck rank, rank 0's timeline is complete JSON with the
STALL instant, `ranktime run` says why the job was aborted, and no process of the job is left.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

FAULT = os.environ["FAULT_INJECTION_BIN"]
CLI = os.environ["RANKTIME_CLI"]
STUCK_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stuck_program.py")
STALL_SHUTDOWN_S = 3
# A hang guard only, far above the expected ~6 s; the stuck rank would return after 120 s.
BOUND_S = STALL_SHUTDOWN_S + 30
VICTIM = 1


def lines_with(prefix, stdout):
    return [l[len(prefix):] for l in stdout.splitlines() if l.startswith(prefix)]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run_stuck(program, kind, ranks, trace):
    cmd = [CLI, "run", "-np", str(ranks), "--oversubscribe",
           "--stall-check-warning-time-seconds", "1",
           "--stall-check-shutdown-time-seconds", str(STALL_SHUTDOWN_S),
           "--timeline-filename", str(trace), "--"]
    cmd += [FAULT, f"stuck-{kind}"] if program == "cpp" else [sys.executable, STUCK_PY, kind]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the job did not end within {BOUND_S} s:\n{e.stdout}\n{e.stderr}")
    return p, time.monotonic() - start


# Every pair of (program, kind, ranks) values once: 9 jobs instead of all 18 combinations (each
# job waits out the stall shutdown; CI time).
PAIRWISE = [("cpp", "sleep", 2), ("python", "sleep", 3), ("cpp", "sleep", 4),
            ("python", "busy", 2), ("cpp", "busy", 3), ("python", "busy", 4),
            ("cpp", "mpi", 2), ("python", "mpi", 3), ("python", "mpi", 4)]


@pytest.mark.parametrize("program,kind,ranks", PAIRWISE)
def test_a_stall_shutdown_ends_the_job_while_one_rank_is_stuck(program, kind, ranks, tmp_path):
    trace = tmp_path / "stuck.json"
    p, elapsed = run_stuck(program, kind, ranks, trace)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    pids = {int(r): int(pid) for r, pid in re.findall(r"PID (\d+) (\d+)", p.stdout)}
    assert set(pids) == set(range(ranks)), out

    # Every responsive rank reported the stall, naming the stuck rank.
    errors = {}
    for line in lines_with("ERROR: ", p.stdout):
        message, rank = line.rsplit(" [rank ", 1)
        errors.setdefault(int(rank[:-1]), []).append(message)
    assert set(errors) == set(range(ranks)) - {VICTIM}, out
    for messages in errors.values():
        for m in messages:
            assert "stalled for more than RANKTIME_STALL_SHUTDOWN_S" in m, m
            assert f"rank {VICTIM} did not submit" in m, m
    assert f"ranktime run: the job was aborted (exit status {p.returncode}): rank " in p.stderr, out
    assert f"rank {VICTIM} did not submit" in p.stderr.split("ranktime run: the job was aborted")[1]

    # Rank 0 closed its timeline before the abort: complete JSON, with the STALL instant.
    events = json.loads(trace.read_text())
    assert any(e.get("name") == "ranktime_run_end" for e in events)
    stalls = [e for e in events if e.get("ph") == "i" and e.get("name") == "STALL"]
    assert stalls and f"rank {VICTIM} did not submit" in stalls[0]["args"]["message"], stalls

    # Nothing of the job is left (mpirun may still be reaping for a moment).
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [r for r, pid in pids.items() if alive(pid)], pids
    assert elapsed < BOUND_S

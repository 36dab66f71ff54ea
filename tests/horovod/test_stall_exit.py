"""Horovod 0.28.1's integration/test_stall.py, unchanged, at 2 ranks through the renaming shim.

Rank 1 sleeps 10 s before its allreduce; the HOROVOD_STALL_* values the test sets shut the job
down after 5 s; every rank catches the error and calls shutdown(). Under Horovod the processes
then exit 0, and so must they here: every rank reaches its exit, so the job ends normally instead
of being aborted. The output is checked too, so that a job that never stalled does not pass.
"""
import os
import shlex
import subprocess
import sys

TEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integration", "test_stall.py")


def test_a_stall_shut_down_job_whose_ranks_all_exit_ends_normally():
    env = dict(os.environ)
    for ours in ("RANKTIME_STALL_SHUTDOWN_S", "RANKTIME_STALL_WARNING_S"):
        env.pop(ours, None)  # ours would win over the test's HOROVOD_* values
    cmd = [os.environ["MPIRUN"], *shlex.split(os.environ.get("MPIRUN_FLAGS", "")), "-np", "2",
           sys.executable, "-m", "pytest", "-s", "-x", "-q", "-p", "no:cacheprovider", TEST]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert out.count("1 passed") == 2, out
    # The test's HOROVOD_STALL_CHECK_TIME_SECONDS=2 and HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5.
    assert "stall: rank 1 did not submit" in out, out
    assert "stall: shutting down after RANKTIME_STALL_SHUTDOWN_S=5 s" in out, out
    assert "unless every rank reaches its exit first" in out, out

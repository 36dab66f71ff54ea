"""examples/train_mnist_like.py end to end: 4 ranks with rank 2 late every step; the timeline
names rank 2 as the one everybody waited for. Runs the launcher itself (not under mpirun)."""

import collections
import json
import os
import re
import subprocess
import sys

BUILD = os.environ["RANKTIME_BUILD_DIR"]
SOURCE = os.environ["RANKTIME_SOURCE_DIR"]
CLI = os.path.join(BUILD, "ranktime")
EXAMPLE = os.path.join(SOURCE, "examples", "train_mnist_like.py")
SLOW_RANK = 2


def launch(timeline):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # The MLP keeps compute short next to the delay, even with 4 ranks sharing 2 cores.
    program = [sys.executable, EXAMPLE, "--epochs", "1", "--samples", "1024", "--model", "mlp",
               "--slow-rank", str(SLOW_RANK), "--delay-ms", "50"]
    if os.access(CLI, os.X_OK):
        command = [CLI, "run", "-np", "4", "--timeline-filename", timeline, "--"] + program
    else:  # the launcher is not built: the same through mpirun
        env["TIMELINE_FILENAME"] = timeline
        command = [os.environ.get("RANKTIME_MPIRUN", "mpirun"), "--allow-run-as-root",
                   "--oversubscribe", "--bind-to", "none", "-np", "4",
                   "-x", "TIMELINE_FILENAME", "-x", "PYTHONPATH"] + program
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, " ".join(command) + "\n" + run.stdout + run.stderr
    assert "epoch 1: loss" in run.stdout, run.stdout
    return run


def test_timeline_names_the_slow_rank(tmp_path):
    timeline = str(tmp_path / "t.json")
    launch(timeline)
    with open(timeline) as f:
        events = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert "allreduce.fc1.weight" in names.values() and "allreduce.fc2.bias" in names.values()
    last = collections.Counter(
        e["args"]["last_rank"] for e in events
        if e.get("name") == "NEGOTIATE_ALLREDUCE" and e.get("ph") in ("E", "X")
        and names.get(e["pid"], "").startswith("allreduce.fc"))
    assert last.most_common(1)[0][0] == SLOW_RANK, last

    if not os.access(CLI, os.X_OK):
        print("the ranktime CLI is not built: skipped `ranktime summary`")
        return
    summary = subprocess.run([CLI, "summary", timeline], capture_output=True, text=True)
    assert summary.returncode == 0, summary.stdout + summary.stderr
    print(summary.stdout)
    assert re.search(r"^slowest rank: %d\b" % SLOW_RANK, summary.stdout, re.MULTILINE), \
        summary.stdout

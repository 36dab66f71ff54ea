"""examples/train_ddp.py under `ranktime run`, with nothing set for torch.distributed: 4 ranks,
rank 2 late every step; the timeline passes `ranktime check` and `ranktime summary` names rank 2.
Runs the launcher itself (not under mpirun)."""

import os
import re
import subprocess
import sys

CLI = os.path.join(os.environ["RANKTIME_BUILD_DIR"], "ranktime")
EXAMPLE = os.path.join(os.environ["RANKTIME_SOURCE_DIR"], "examples", "train_ddp.py")
SLOW_RANK = 2


def cli(*args, env=None):
    run = subprocess.run([CLI] + list(args), env=env, capture_output=True, text=True, timeout=500)
    assert run.returncode == 0, " ".join(args) + "\n" + run.stdout + run.stderr
    return run.stdout


def test_ddp_example_under_ranktime_run_names_the_late_rank(tmp_path):
    timeline = str(tmp_path / "ddp.json")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    out = cli("run", "-np", "4", "--timeline-filename", timeline, "--", sys.executable, EXAMPLE,
              "--epochs", "1", "--samples", "1024", "--slow-rank", str(SLOW_RANK),
              "--delay-ms", "50", env=env)
    assert re.search(r"^epoch 1: loss \d", out, re.MULTILINE), out
    cli("check", timeline)
    summary = cli("summary", timeline)
    print(summary)
    assert re.search(r"^slowest rank: %d\b" % SLOW_RANK, summary, re.MULTILINE), summary
    assert re.search(r"^\s+c10d\.0\s", summary, re.MULTILINE), summary  # DDP's bucket, by name

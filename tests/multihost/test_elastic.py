"""Elastic training on emulated hosts (3 hosts x 1 rank): `ranktime run --host-discovery-script`
with elastic_train.py (hvd.elastic.run, TorchState, ElasticSampler, a commit every batch).
- every process of h2 killed mid-epoch: h2 is blacklisted, the job restarts on h0 and h1 from
  the newest commit and finishes there; the final weights are those of one process replaying the
  committed steps (each step's batches averaged over that step's ranks);
- with a blacklist cooldown, h2 comes back: the launcher tells the ranks, they restart after
  their next commit, and the third attempt runs on 3 hosts again;
- with --reset-limit 1, a second failure ends the job with a message that says so.
Each attempt writes its own complete trace, whose run metadata says which attempt it is, on which
hosts and why the job restarted."""
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import CLI, ENV, check_trace, run_metadata, summary_json

HERE = Path(__file__).resolve().parent
PYTHON_DIR = Path(CLI).parent / "python"
EPOCHS, SLEEP_S = "2", "0.3"


def discovery(tmp_path, hosts):
    """(Re)writes the hosts the discovery script prints."""
    (tmp_path / "hosts").write_text("".join(f"{h}:1\n" for h in hosts))
    script = tmp_path / "discover.sh"
    if not script.exists():
        script.write_text(f"#!/bin/sh\ncat {tmp_path / 'hosts'}\n")
        script.chmod(0o755)
    return script


def kill_host(cluster, host):
    """SIGKILL to every process inside `host` (its ranks and its Open MPI daemon)."""
    pids = cluster.host_processes(host)
    assert pids, f"nothing runs on {host}"
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def elastic_job(cluster, tmp_path, actions, *flags):
    """Runs elastic_train.py on h0..h2 and calls actions[N]() when rank 0 has printed the line
    that starts with N; returns (exit status, output with stderr, the result file's contents)."""
    if not (PYTHON_DIR / "ranktime").is_dir():
        pytest.skip(f"the Python module is not built in {PYTHON_DIR.parent}")
    script = discovery(tmp_path, cluster.names)
    args = [CLI, "run", "-np", "3", "--min-np", "2", "--host-discovery-script", script,
            *cluster.ranktime_args(), "--mpi-arg=-x", f"--mpi-arg=PYTHONPATH={PYTHON_DIR}",
            "--timeline-filename", tmp_path / "t.json", *flags, "--",
            "/usr/bin/python3", HERE / "elastic_train.py", tmp_path / "out.pt", EPOCHS, SLEEP_S]
    job = cluster.popen(list(map(str, args)), env=ENV, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in job.stdout:
            lines.append(line)
            for start in [s for s in actions if line.startswith(s)]:
                actions.pop(start)()
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            cluster.kill(job)
    output = "".join(lines)
    assert not actions, f"never saw {list(actions)}:\n{output[-4000:]}"
    result = tmp_path / "out.pt"
    return job.returncode, output, torch.load(result) if result.exists() else None


def assert_replays(result):
    from elastic_train import replay
    expected = replay(result["schedule"])
    for name, value in result["weights"].items():
        assert torch.allclose(value, expected[name], rtol=1e-5, atol=1e-6), \
            (name, value, expected[name])


def sizes(result):
    """The world size of each committed step, run-length encoded: [(3, 3), (2, 14)]."""
    runs = []
    for batches in result["schedule"]:
        if runs and runs[-1][0] == len(batches):
            runs[-1][1] += 1
        else:
            runs.append([len(batches), 1])
    return [tuple(r) for r in runs]


def attempt_metadata(trace):
    meta = run_metadata(trace)
    config = meta["config"]
    return (config["RANKTIME_ELASTIC_ATTEMPT"], meta["hostnames"],
            config["RANKTIME_ELASTIC_RESTART_REASON"])


@pytest.mark.cluster(hosts=3, slots=1)
def test_a_lost_host_the_job_finishes_on_the_others_with_the_same_weights(cluster, tmp_path):
    rc, out, result = elastic_job(cluster, tmp_path,
                                  {"elastic-step 3 ": lambda: kill_host(cluster, "h2")})
    assert rc == 0, out[-4000:]
    assert "ranktime run: attempt 0 on h0:1,h1:1,h2:1 (3 ranks)" in out, out[-4000:]
    assert "attempt 0 ended (exit status" in out and "lost host h2" in out, out[-4000:]
    # h2 is still in the discovery script's output, and left out: blacklisted.
    assert "ranktime run: attempt 1 on h0:1,h1:1 (2 ranks)" in out, out[-4000:]
    assert "attempt 2" not in out
    # The restart resumed from a commit made at 3 ranks and ran the rest at 2.
    steps = sizes(result)
    assert [size for size, _ in steps] == [3, 2] and steps[0][1] >= 3, steps
    assert_replays(result)
    # Each attempt's trace is complete and says which attempt, where and why.
    for trace in ("t.json", "t.attempt1.json"):
        check_trace(tmp_path / trace)
    assert attempt_metadata(tmp_path / "t.json") == ("0", ["h0", "h1", "h2"], "")
    attempt, hosts, reason = attempt_metadata(tmp_path / "t.attempt1.json")
    assert (attempt, hosts) == ("1", ["h0", "h1"]) and reason.startswith("lost host h2: "), reason
    # `ranktime summary` of the set puts the attempts on one time axis: the lost host, when, what
    # the restart cost, and the work since attempt 0's last commit (rank 0's elastic.commit).
    p = subprocess.run([CLI, "summary", str(tmp_path / "t*.json")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "attempts: 2 (the figures below are attempt 1's)" in p.stdout, p.stdout
    assert re.search(r"^restart 1 \(attempt 0 -> 1\): lost host h2 at \d+\.\d\d s; restart took "
                     r"\d+\.\d\d s \(attempt 0's last event to attempt 1's first step\); "
                     r"\d+ steps? and \d+\.\d\d s since the last commit redone; "
                     r"reason: lost host h2: ",
                     p.stdout, re.M), p.stdout
    summary = summary_json(tmp_path / "t*.json")
    attempts = summary["attempts"]
    assert [(a["attempt"], a["hosts"]) for a in attempts] == [(0, ["h0", "h1", "h2"]),
                                                             (1, ["h0", "h1"])], attempts
    first, second = attempts
    assert first["start_s"] == 0 and first["end_s"] <= second["start_s"] < second["first_step_s"]
    # Commits 1 to 3 at least were made before h2 was killed.
    assert first["start_s"] < first["last_commit_s"] <= first["end_s"], first
    # `ranktime report` of the set shows the same restarts, before attempt 1's figures.
    page = tmp_path / "report.html"
    p = subprocess.run([CLI, "report", str(tmp_path / "t*.json"), "-o", str(page)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    data = page.read_text().split('id="report-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["attempts"]["lines"] == summary["restarts"]


@pytest.mark.cluster(hosts=3, slots=1)
def test_the_lost_host_back_in_discovery_the_next_restart_uses_three_hosts(cluster, tmp_path):
    rc, out, result = elastic_job(cluster, tmp_path,
                                  {"elastic-step 3 ": lambda: kill_host(cluster, "h2")},
                                  "--blacklist-cooldown-range", "3", "3")
    assert rc == 0, out[-4000:]
    assert "ranktime run: attempt 1 on h0:1,h1:1 (2 ranks)" in out, out[-4000:]
    assert "hosts appeared (h2): the job restarts on them after its next commit" in out, \
        out[-4000:]
    assert "ranktime run: attempt 2 on h0:1,h1:1,h2:1 (3 ranks)" in out, out[-4000:]
    assert [size for size, _ in sizes(result)] == [3, 2, 3], sizes(result)
    assert_replays(result)
    attempt, hosts, reason = attempt_metadata(tmp_path / "t.attempt2.json")
    assert (attempt, hosts, reason) == ("2", ["h0", "h1", "h2"], "hosts appeared")


@pytest.mark.cluster(hosts=3, slots=1)
def test_reset_limit_ends_the_job_at_the_second_failure(cluster, tmp_path):
    rc, out, result = elastic_job(cluster, tmp_path,
                                  {"elastic-step 3 ": lambda: kill_host(cluster, "h2"),
                                   "elastic-start size 2": lambda: kill_host(cluster, "h1")},
                                  "--reset-limit", "1")
    assert rc != 0 and result is None, out[-4000:]
    assert "ranktime run: error: giving up after 1 reset (--reset-limit 1): attempt 1 ended: " \
           "lost host h1" in out, out[-4000:]
    assert "attempt 2" not in out

"""ranktime.torch.profile and `ranktime merge` end to end: profile_job.py trains a small model on
2 and 4 ranks (some ranks' clocks skewed by +-50 ms), then every rank's profiler trace is merged
onto the timeline. On the merged page every aten:: operator a rank ran in forward lies inside that
rank's `forward` region, and each gradient's allreduce submission holds that rank's tick for it,
both within the rank's clock uncertainty + 50 us. When one rank sleeps in a `slow_op` range inside
forward, the merged summary's causes name that rank, `forward` and `slow_op`. Runs the launcher
itself (not under mpirun)."""

import bisect
import collections
import glob
import json
import os
import subprocess
import sys

import pytest

BUILD = os.environ["RANKTIME_BUILD_DIR"]
SOURCE = os.environ["RANKTIME_SOURCE_DIR"]
CLI = os.path.join(BUILD, "ranktime")
JOB = os.path.join(SOURCE, "tests", "python", "profile_job.py")
STEPS = 6
SLACK_US = 50
RANK_PID_BASE = 1_000_000_000  # trace_names.h: rank R's process
TORCH_PID_BASE = 1_500_000_000  # ... and its torch process

pytestmark = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="the ranktime CLI is not built")


_jobs = {}


def job(tmp_path_factory, ranks, skews, slow_rank=-1):
    """run_job, once per (ranks, skews, slow_rank) for the whole module."""
    key = (ranks, skews, slow_rank)
    if key not in _jobs:
        _jobs[key] = run_job(tmp_path_factory.mktemp("job"), ranks, skews, slow_rank)
    return _jobs[key]


def run_job(tmp_path, ranks, skews, slow_rank):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    timeline = str(tmp_path / "t.json")
    profiles = str(tmp_path / "profiles")
    command = [CLI, "run", "-np", str(ranks), "--timeline-filename", timeline, "--",
               sys.executable, JOB, profiles, str(STEPS), skews, str(slow_rank)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, " ".join(command) + "\n" + run.stdout + run.stderr
    files = sorted(glob.glob(os.path.join(profiles, "profile.rank*.json")))
    assert len(files) == ranks, files
    return timeline, files, "region True" in run.stdout


def merge(timeline, files, out):
    merged = subprocess.run([CLI, "merge", timeline, *files, "-o", out], capture_output=True,
                            text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    with open(out) as f:
        return json.load(f)


def inside(ts, end, spans, tolerance):
    """Whether [ts, end] lies in one of the sorted (begin, end) spans, give or take tolerance."""
    i = bisect.bisect_right(spans, (ts + tolerance, float("inf"))) - 1
    return i >= 0 and spans[i][0] - tolerance <= ts and end <= spans[i][1] + tolerance


@pytest.mark.parametrize("ranks, skews", [(2, "0,50000"), (4, "0,-50000,0,50000")])
def test_merged_profiles_line_up_with_the_timeline(tmp_path, tmp_path_factory, ranks, skews):
    timeline, files, has_regions = job(tmp_path_factory, ranks, skews)
    events = merge(timeline, files, str(tmp_path / "merged.json"))
    run = next(e for e in events if e.get("name") == "ranktime_run")["args"]
    tolerance = [u + SLACK_US for u in run["clock_uncertainty_us"]]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    for r in range(ranks):
        assert names[TORCH_PID_BASE + r] == "rank %d (torch)" % r

    torch_events = collections.defaultdict(list)  # rank -> its X events
    regions = collections.defaultdict(list)       # rank -> its forward regions
    ticks = collections.defaultdict(list)          # (tensor name, rank) -> tick times
    for e in events:
        pid = e.get("pid")
        if e.get("ph") != "X" or not isinstance(pid, int):
            continue
        if pid >= TORCH_PID_BASE:
            torch_events[pid - TORCH_PID_BASE].append(e)
        elif pid >= RANK_PID_BASE and e["name"] == "forward":
            regions[pid - RANK_PID_BASE].append((e["ts"], e["ts"] + e["dur"]))
        elif pid > 0 and e.get("tid") == 0 and e["name"].isdigit():
            ticks[(names.get(pid, ""), int(e["name"]))].append(e["ts"])

    for r in range(ranks):
        mine = torch_events[r]
        # Operators run in forward: aten:: slices inside a job.forward range of the same thread.
        forwards = [e for e in mine if e["name"] == "job.forward"]
        assert len(forwards) == STEPS, (r, len(forwards))
        in_forward = [e for e in mine if e["name"].startswith("aten::") and any(
            f["tid"] == e["tid"] and f["ts"] <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"]
            for f in forwards)]
        assert len(in_forward) >= 3 * STEPS, (r, len(in_forward))
        if has_regions:
            spans = sorted(regions[r])
            assert len(spans) == STEPS, (r, spans)
            for e in in_forward:
                assert inside(e["ts"], e["ts"] + e["dur"], spans, tolerance[r]), (r, e, spans)

        # Each gradient's submission holds this rank's tick for it (its readiness was stamped
        # inside the range).
        submits = collections.defaultdict(list)
        for e in mine:
            if e["name"].startswith("job.submit."):
                submits["grad." + e["name"][len("job.submit."):]].append(e)
        assert len(submits) == 4, sorted(submits)
        for tensor, ranges in submits.items():
            times = sorted(ticks[("allreduce." + tensor, r)])  # Horovod-style names
            assert len(times) == len(ranges) == STEPS, (tensor, r, times, len(ranges))
            for tick, e in zip(times, sorted(ranges, key=lambda e: e["ts"])):
                assert e["ts"] - tolerance[r] <= tick <= e["ts"] + e["dur"] + tolerance[r], \
                    (tensor, r, tick, e)

    for command in (["check"], ["summary"]):
        result = subprocess.run([CLI, *command, str(tmp_path / "merged.json")],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, command + [result.stdout, result.stderr]


def test_the_summary_names_the_operator_inside_the_slow_ranks_forward(tmp_path,
                                                                    tmp_path_factory):
    timeline, files, has_regions = job(tmp_path_factory, 2, "0,50000", slow_rank=1)
    if not has_regions:
        pytest.skip("this build has no ranktime.region")
    merged = str(tmp_path / "merged.json")
    merge(timeline, files, merged)
    result = subprocess.run([CLI, "summary", "--format", "json", merged], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    causes = json.loads(result.stdout)["causes"]
    assert causes, result.stdout
    top = causes[0]
    assert (top["rank"], top["region"]) == (1, "forward"), causes
    assert top["operators"] and top["operators"][0]["name"] == "slow_op", top
    text = subprocess.run([CLI, "summary", merged], capture_output=True, text=True, timeout=120)
    cause = text.stdout.splitlines()[1]
    assert cause.startswith("cause: rank 1 ") and '; inside it, "slow_op" took' in cause, cause


def test_merge_refuses_another_runs_profile(tmp_path, tmp_path_factory):
    first, files, _ = job(tmp_path_factory, 2, "0,50000")
    _, other, _ = job(tmp_path_factory, 4, "0,-50000,0,50000")  # its rank 1 was another process
    out = str(tmp_path / "merged.json")
    result = subprocess.run([CLI, "merge", first, files[0], other[1], "-o", out],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert other[1] + ": from another run" in result.stderr, result.stderr
    assert "nothing written" in result.stderr
    assert not os.path.exists(out)

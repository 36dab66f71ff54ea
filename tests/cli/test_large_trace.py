"""`summary`, `check` and `report` stream a large trace (1 GiB by default;
RANKTIME_LARGE_TRACE_MB changes it) in bounded memory and report progress. Also measures the
events parsed per second."""
import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import CLI, generate

SIZE_MB = float(os.environ.get("RANKTIME_LARGE_TRACE_MB", "1024"))
# What the reader keeps does not grow with the file: its 1 MiB buffer, one event, and state per
# tensor and rank. 64 MiB is several times what it uses and a fraction of the file.
MAX_RSS_MB = 64
# About eight progress reports per file.
PROGRESS_MB = max(1.0, SIZE_MB / 8)


@pytest.fixture(scope="module")
def large_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("large") / "large.json"
    generate(path, ranks=8, tensors=100, fused=10, slow_rank=3, delay_us=20000, steps=1,
             target_mb=SIZE_MB, step_marks=True, start_lag_us=5)
    yield path
    path.unlink()  # do not leave a gigabyte behind in pytest's kept temporary directories


def high_water_mark_mb(pid):
    """VmHWM of a running process, in MiB; None once it has exited. (ru_maxrss would count the
    pytest process it was forked from: the high-water mark survives exec.)"""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_measured(*args):
    """Runs ranktime; returns (stdout, stderr, peak RSS in MiB, CPU seconds, wall seconds)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.monotonic()
        process = subprocess.Popen([CLI, *map(str, args)], stdout=out, stderr=err)
        peak = 0.0
        while (mark := high_water_mark_mb(process.pid)) is not None:
            peak = max(peak, mark)
            time.sleep(0.05)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert process.returncode == 0, stdout + stderr
    assert peak > 0, "could not read the process's memory use"
    return stdout, stderr, peak, usage.ru_utime + usage.ru_stime, wall


def events_in(stdout_json):
    return stdout_json["reader"]["events"]


def report(name, events, cpu, wall, rss):
    line = (f"{name}: {events} events, {SIZE_MB:.0f} MiB: {events / cpu / 1e6:.2f} M events/s "
            f"of CPU time ({cpu:.1f} s), {events / wall / 1e6:.2f} M events/s wall ({wall:.1f} s), "
            f"max RSS {rss:.1f} MiB")
    print(line)
    with open("large_trace_benchmark.txt", "a") as f:
        f.write(line + "\n")


def test_summary_streams_in_bounded_memory(cli, large_trace):
    stdout, stderr, rss, cpu, wall = run_measured("summary", large_trace, "--format", "json",
                                             "--progress", "--progress-every-mb", PROGRESS_MB)
    summary = json.loads(stdout)
    assert summary["slowest_rank"] == 3
    assert summary["reader"]["complete"] is True
    progress = [line for line in stderr.splitlines() if line.startswith("ranktime summary: ")]
    assert len(progress) >= 7, stderr
    assert "events/s" in progress[0]
    assert rss < MAX_RSS_MB, f"summary used {rss:.0f} MiB for a {SIZE_MB:.0f} MiB trace"
    report("summary", events_in(summary), cpu, wall, rss)


def test_check_streams_in_bounded_memory(cli, large_trace):
    stdout, stderr, rss, cpu, wall = run_measured("check", large_trace, "--progress",
                                             "--progress-every-mb", PROGRESS_MB)
    assert ": OK: " in stdout
    progress = [line for line in stderr.splitlines() if line.startswith("ranktime check: ")]
    assert len(progress) >= 7, stderr
    assert rss < MAX_RSS_MB, f"check used {rss:.0f} MiB for a {SIZE_MB:.0f} MiB trace"
    events = int(stdout.split(": OK: ")[1].split(" events")[0])
    report("check", events, cpu, wall, rss)


def test_report_streams_in_bounded_memory(cli, large_trace, tmp_path):
    """The page holds aggregates: both passes (step marks, then the analysis) stay in bounded
    memory, and the page is small."""
    page = tmp_path / "large.html"
    stdout, stderr, rss, cpu, wall = run_measured("report", large_trace, "-o", page, "--progress",
                                             "--progress-every-mb", PROGRESS_MB)
    # "PAGE: B bytes, S steps, R ranks, from E events"
    facts = stdout.strip().split(": ")[1].split(", ")
    assert int(facts[1].split()[0]) > 100
    events = int(facts[3].split()[1])
    passes = [line for line in stderr.splitlines() if line.startswith("ranktime report: pass ")]
    assert any("pass 1 of 2 (step marks)" in line for line in passes), stderr
    assert rss < MAX_RSS_MB, f"report used {rss:.0f} MiB for a {SIZE_MB:.0f} MiB trace"
    assert page.stat().st_size < 2 * 1024 * 1024
    report("report (two passes)", 2 * events, cpu, wall, rss)

"""`ranktime merge` on large synthetic input: a small two-rank timeline and one legacy (torch 1.13)
profiler trace per rank of SIZE MB each, with anchors every 10 ms; prints the merge's wall time,
throughput and peak RSS (GNU time), and how big the inputs and output were.

    python3 bench/merge_bench.py BUILD_DIR [--mb-per-rank 128] [--ranks 2] [--keep DIR]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

ZERO_NS = 5_000_000_000


def write_timeline(path, ranks):
    run = {"ranks": ranks, "hostnames": ["bench"] * ranks, "pids": list(range(100, 100 + ranks)),
           "clock_offsets_us": [0.0] * ranks, "clock_uncertainty_us": [0.0] * ranks,
           "clock_zero_ns": ZERO_NS}
    events = [{"name": "ranktime_run", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": 0,
               "args": run}]
    with open(path, "w") as f:
        json.dump(events, f)


def write_profile(path, rank, megabytes):
    """Operators 20 us apart on 4 threads, names with quotes and markup, and an anchor pair every
    10 ms; legacy format (ts relative to the profiler's start)."""
    limit = megabytes << 20
    with open(path, "w") as f:
        f.write("[")
        written, us, n = 1, 0, 0
        first = True
        while written < limit:
            chunk = []
            for i in range(500):
                chunk.append('{"name": "aten::op_%d \\"<b>\\"", "ph": "X", "ts": %d, "dur": 15, '
                             '"tid": %d, "pid": "CPU functions", "args": {"seq": %d}}'
                             % (i % 50, us, 1 + i % 4, i))
                us += 20
                if us // 10_000 > n:
                    clock = ZERO_NS + us * 1000
                    chunk.append('{"name": "ranktime.anchor.%d", "ph": "X", "ts": %d, "dur": 2, '
                                 '"tid": 1, "pid": "CPU functions", "args": {}}' % (n, us - 1))
                    chunk.append('{"name": "ranktime.anchor.%d.ns.%d.rank.%d.pid.%d.host.bench", '
                                 '"ph": "X", "ts": %d, "dur": 1, "tid": 1, "pid": "CPU functions",'
                                 ' "args": {}}' % (n, clock, rank, 100 + rank, us + 2))
                    n += 1
            text = ("" if first else ", ") + ", ".join(chunk)
            first = False
            f.write(text)
            written += len(text)
        f.write("]")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--mb-per-rank", type=int, default=128)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--keep", help="write the inputs here and keep them")
    args = parser.parse_args()
    work = args.keep or tempfile.mkdtemp(prefix="merge_bench_")
    os.makedirs(work, exist_ok=True)
    timeline = os.path.join(work, "t.json")
    write_timeline(timeline, args.ranks)
    profiles = []
    for r in range(args.ranks):
        p = os.path.join(work, "profile.rank%d.json" % r)
        if not os.path.exists(p):
            write_profile(p, r, args.mb_per_rank)
        profiles.append(p)
    out = os.path.join(work, "merged.json")
    start = time.monotonic()
    run = subprocess.run(["/usr/bin/time", "-v", os.path.join(args.build, "ranktime"), "merge",
                          timeline, *profiles, "-o", out], capture_output=True, text=True)
    wall = time.monotonic() - start
    assert run.returncode == 0, run.stdout + run.stderr
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)",
                                           run.stderr))
    size_in = sum(os.path.getsize(p) for p in profiles)
    events = sum(int(m) for m in re.findall(r"^rank \d+: (\d+) of", run.stdout, re.MULTILINE))
    print("input %.1f MiB in %d profiles, %d events; output %.1f MiB" % (
        size_in / 2**20, len(profiles), events, os.path.getsize(out) / 2**20))
    print("merge: %.1f s wall, %.1f s CPU, %.1f MiB/s and %.2f M events/s of CPU, peak RSS "
          "%.1f MiB" % (wall, cpu, size_in / 2**20 / cpu, events / 1e6 / cpu, rss_kb / 1024))
    if not args.keep:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()

"""Rank 0's background-thread CPU time per step in real runs (issue 20): ranktime-synth on the
ResNet-50 set under `ranktime run`, timeline on, with the response cache on
(RANKTIME_CACHE_CAPACITY=1024) and off (0), at each rank count (oversubscribed past the cores).

Every rank logs its background thread's CPU time (CLOCK_THREAD_CPUTIME_ID, over the whole loop)
at shutdown at debug level; this reads rank 0's. Each configuration runs twice, with the short
and the long step count of --steps, and the figure is the difference over the extra steps, so
start-up, the warm-up step and shutdown cancel out. CPU time, not wall time: oversubscription
stretches the steps, not what the thread itself spends (though a crowded machine still adds
cache misses, and the thread's polling while it waits for the others counts). Each run must
verify its results and its trace must pass `ranktime check`. One line per configuration:

  rank0_cpu ranks=16 cache=on steps=5,25 us_per_step=X cpu_ms=A,B step_ms=C check=ok

Usage: rank0_cpu_bench.py BUILD_DIR [--ranks 16,32] [--steps 5,25] [--workload FILE]
                          [--timeline-ranks VALUE] [--rounds 1]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

CPU_LINE = re.compile(r"\[ranktime 0\] debug: background thread CPU ([\d.]+) ms over (\d+) steps")


def run(build, ranks, steps, cache, workload, timeline_ranks, trace):
    """One job; returns (rank 0's background CPU ms, steps marked, median step ms)."""
    cmd = [os.path.join(build, "ranktime"), "run", "-np", str(ranks), "--timeline-filename", trace,
           "--log-level", "debug"]
    if timeline_ranks:
        cmd += ["--timeline-ranks", timeline_ranks]
    cmd += ["--", os.path.join(build, "ranktime-synth"), "--quiet", "--workload", workload,
            "--steps", str(steps)]
    env = dict(os.environ, RANKTIME_CACHE_CAPACITY="1024" if cache else "0")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0 or "verify=ok" not in p.stdout:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
    cpu = CPU_LINE.search(p.stderr)
    if not cpu:
        sys.exit(f"no rank 0 'background thread CPU' line in the debug log:\n{p.stderr[-4000:]}")
    check = subprocess.run([os.path.join(build, "ranktime"), "check", trace], capture_output=True,
                           text=True)
    if check.returncode != 0:
        sys.exit(f"{trace} does not pass ranktime check:\n{check.stdout}{check.stderr}")
    os.remove(trace)
    step = re.search(r"median_step_ms=([\d.]+)", p.stdout)
    return float(cpu.group(1)), int(cpu.group(2)), float(step.group(1)) if step else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ranks", default="16,32")
    ap.add_argument("--steps", default="5,25", help="the short and the long run's steps")
    ap.add_argument("--workload", default="examples/workloads/resnet50.tsv")
    ap.add_argument("--timeline-ranks", default="", help="TIMELINE_RANKS for every run")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    short, long = (int(s) for s in a.steps.split(","))
    trace = os.path.join(tempfile.mkdtemp(prefix="ranktime-rank0-cpu-"), "t.json")
    for ranks in (int(r) for r in a.ranks.split(",")):
        for cache in (True, False):
            for _ in range(a.rounds):
                cpu_short, marked_short, _ = run(a.build, ranks, short, cache, a.workload,
                                                 a.timeline_ranks, trace)
                cpu_long, marked_long, step_ms = run(a.build, ranks, long, cache, a.workload,
                                                     a.timeline_ranks, trace)
                per_step = (cpu_long - cpu_short) * 1e3 / max(1, marked_long - marked_short)
                print(f"rank0_cpu ranks={ranks} cache={'on' if cache else 'off'} "
                      f"steps={marked_short},{marked_long} us_per_step={per_step:.0f} "
                      f"cpu_ms={cpu_short:.1f},{cpu_long:.1f} step_ms={step_ms:.1f} check=ok",
                      flush=True)


if __name__ == "__main__":
    main()

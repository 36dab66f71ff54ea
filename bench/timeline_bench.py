"""Timeline overhead, in one run: ranktime-synth with the timeline off, on, and on with cycle
markers, on the ResNet-50 gradient set and on 1,000 small tensors. Rounds are interleaved so that
drift in machine load hits every variant alike; prints the median step time of each variant and
the on/off ratios, and the trace's size per event. Also the idle CPU of a runtime with the
timeline off and on (allreduce_bench --idle-only).

Usage: timeline_bench.py BUILD_DIR [--ranks 2] [--rounds 5] [--steps 20]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile


def synth(build, ranks, args, env):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "ranktime-synth"), "--quiet", "--no-verify"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median_step_ms=([\d.]+)", out).group(1))


def idle_cpu(build, ranks, env, seconds):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "bench", "allreduce_bench"), "--idle-only", "--idle-seconds", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([\d.]+)% of one core", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--idle-seconds", type=float, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ranktime-tlbench-")
    trace = os.path.join(tmp, "t.json")
    workloads = {
        "resnet50": ["--workload", "examples/workloads/resnet50.tsv"],
        "1000 small tensors": ["--small-tensors", "1000", "--small-elements", "256"],
    }
    variants = {
        "off": {},
        "on": {"TIMELINE_FILENAME": trace},
        "on+cycles": {"TIMELINE_FILENAME": trace, "TIMELINE_MARK_CYCLES": "1"},
    }
    print(f"ranks={a.ranks} rounds={a.rounds} steps={a.steps} (median step time per run; ratios of medians)")
    for wname, wargs in workloads.items():
        times = {v: [] for v in variants}
        size = events = 0
        for _ in range(a.rounds):
            for vname, env in variants.items():
                times[vname].append(synth(a.build, a.ranks, wargs + ["--steps", str(a.steps)], env))
                if vname == "on":
                    size = os.path.getsize(trace)
                    events = len(json.load(open(trace)))
        med = {v: statistics.median(t) for v, t in times.items()}
        print(f"{wname}: off {med['off']:.3f} ms, on {med['on']:.3f} ms, on+cycles {med['on+cycles']:.3f} ms; "
              f"on/off {med['on'] / med['off']:.3f}, on+cycles/off {med['on+cycles'] / med['off']:.3f}; "
              f"trace {events} events, {size / max(events, 1):.1f} bytes/event")
    off = idle_cpu(a.build, a.ranks, {}, a.idle_seconds)
    on = idle_cpu(a.build, a.ranks, {"TIMELINE_FILENAME": trace}, a.idle_seconds)
    print(f"idle CPU over {a.idle_seconds:.0f} s, summed over {a.ranks} ranks: timeline off {off:.3f}%, on {on:.3f}% of one core")


if __name__ == "__main__":
    main()

"""Timeline overhead, in one run: ranktime-synth with the timeline off, on (t.json), on as gzip
(t.json.gz), and on with cycle markers, on the ResNet-50 gradient set and on 1,000 small tensors;
with --baseline BUILD also another build (e.g. the commit before a change), timeline off and on,
in the same rounds (its on/off ratio against its own off). Rounds are interleaved so that
drift in machine load hits every variant alike (each round in a rotated order); prints each
variant's step time (the median over rounds of each run's median step, and of each run's mean
step), the on/off ratios of those, the on/off ratio paired within each round (the median over
rounds of on/off from runs minutes apart is at the mercy of this VM's slow phases; a round's
runs are seconds apart), and the trace's size per event and per tensor x rank x step (plain
and gzip). Every trace is deleted and the page
cache synced after its run, so no run pays for writing back an earlier run's file. Also the
idle CPU of a runtime with the timeline off and on (allreduce_bench --idle-only).

Each run lasts well over the writer's 250 ms flush interval (by default 60 ResNet-50 steps and
400 small-tensor steps, about 2 s each), so the steps the writer's flushes land on are measured
too: a run shorter than one flush interval would see only the recording cost. The mean step
shows those flushes; the median mostly does not.

Usage: timeline_bench.py BUILD_DIR [--ranks 2] [--rounds 5] [--steps N (both workloads)]
                          [--baseline OTHER_BUILD_DIR] [--workload resnet50|small (default both)]
"""
import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import tempfile


def synth(build, ranks, args, env):
    """Runs `build`'s ranktime-synth on `ranks` ranks; returns its median and mean step (ms)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    cmd += [os.path.join(build, "ranktime-synth"), "--quiet", "--no-verify"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return tuple(float(re.search(key + r"_step_ms=([\d.]+)", out).group(1)) for key in ("median", "mean"))


def events_written(path):
    """The events in a closed trace and its text's size, from its last event (ranktime_run_end):
    the file can be close to a gigabyte, too much to load for a count. A gzip file is read
    through, keeping its end."""
    if path.endswith(".gz"):
        tail, text = b"", 0
        with gzip.open(path, "rb") as f:
            while block := f.read(1 << 20):
                text += len(block)
                tail = (tail + block)[-4096:]
    else:
        text = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, text - 4096))
            tail = f.read()
    run_end = tail.decode("utf-8", "replace").rsplit("\n{", 1)[1]
    return json.loads("{" + run_end.rstrip().rstrip("]").rstrip())["args"]["events_written"], text


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
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--idle-seconds", type=float, default=5)
    ap.add_argument("--baseline", default=None, help="another build whose timeline is timed too")
    ap.add_argument("--workload", choices=("resnet50", "small"), default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ranktime-tlbench-")
    trace = os.path.join(tmp, "t.json")
    workloads = {  # name: (arguments, default steps, tensors)
        "resnet50": (["--workload", "examples/workloads/resnet50.tsv"], 60, 161),
        "1000 small tensors": (["--small-tensors", "1000", "--small-elements", "256"], 400, 1000),
    }
    if a.workload:
        workloads = {k: v for k, v in workloads.items() if a.workload in k}
    variants = {  # name: (build, environment)
        "off": (a.build, {}),
        "on": (a.build, {"TIMELINE_FILENAME": trace}),
        "on-gz": (a.build, {"TIMELINE_FILENAME": trace + ".gz"}),
        "on+cycles": (a.build, {"TIMELINE_FILENAME": trace, "TIMELINE_MARK_CYCLES": "1"}),
    }
    if a.baseline:
        variants["baseline-off"] = (a.baseline, {})
        variants["baseline-on"] = (a.baseline, {"TIMELINE_FILENAME": trace})

    def reference(variant):  # the same build with the timeline off
        return "baseline-off" if variant.startswith("baseline") else "off"
    print(f"ranks={a.ranks} rounds={a.rounds} (medians over rounds of each run's median and mean step)")
    for wname, (wargs, default_steps, tensors) in workloads.items():
        steps = a.steps or default_steps
        times = {v: [] for v in variants}
        sizes = {}  # variant: (events, bytes on disk, text bytes)
        names = list(variants)
        for r in range(a.rounds):
            for vname in names[r % len(names):] + names[:r % len(names)]:
                build, env = variants[vname]
                times[vname].append(synth(build, a.ranks, wargs + ["--steps", str(steps)], env))
                path = env.get("TIMELINE_FILENAME")
                if path and os.path.exists(path):
                    if vname in ("on", "on-gz", "baseline-on"):
                        sizes[vname] = (*events_written(path), os.path.getsize(path))
                    os.remove(path)
                os.sync()
        others = [v for v in variants if v != reference(v)]
        for i, stat in enumerate(("median", "mean")):
            m = {v: statistics.median(t[i] for t in ts) for v, ts in times.items()}
            print(f"{wname}, {steps} steps, {stat} step: off {m['off']:.3f} ms, " +
                  (f"baseline-off {m['baseline-off']:.3f} ms, " if a.baseline else "") +
                  ", ".join(f"{v} {m[v]:.3f} ms ({m[v] / m[reference(v)]:.3f})" for v in others))
        for i, stat in enumerate(("median", "mean")):
            for v in others:
                paired = sorted(t[i] / o[i] for t, o in zip(times[v], times[reference(v)]))
                print(f"{wname}, {stat} step, {v}/{reference(v)} paired within rounds: median "
                      f"{statistics.median(paired):.3f} (rounds {' '.join(f'{x:.2f}' for x in paired)})")
        traced = steps + 1  # ranktime-synth's warm-up step is in the trace too
        per = tensors * a.ranks * traced
        for v, (events, text, disk) in sizes.items():
            print(f"{wname}, {v}: trace {events} events, {events / traced / a.ranks:.0f} events per "
                  f"step per rank, {text / max(events, 1):.1f} text bytes/event; bytes per tensor x "
                  f"rank x step: {text / per:.1f} text, {disk / per:.1f} on disk")
    off = idle_cpu(a.build, a.ranks, {}, a.idle_seconds)
    on = idle_cpu(a.build, a.ranks, {"TIMELINE_FILENAME": trace}, a.idle_seconds)
    print(f"idle CPU over {a.idle_seconds:.0f} s, summed over {a.ranks} ranks: timeline off {off:.3f}%, on {on:.3f}% of one core")


if __name__ == "__main__":
    main()

"""The timeline at scale (issue 17), run by scripts/soak.sh, not the default tests: ranktime-synth
on the BERT set with a capture window and a size budget. Checks that disk use stays bounded (the
trace files, sampled while the run goes, never pass KEEP x (budget + one 512 KiB write piece)),
that each file passes `ranktime check` on its own, and that nothing was dropped.

--scale F runs the BERT steps with every tensor's elements times F, and the fusion threshold and
the largest fused tensor times F too, so the steps keep BERT's tensors, negotiations and fused
batches (what the timeline records) at a fraction of the bytes to reduce: at F = 1, 8 ranks on
a 2-core VM take about 12 s a BERT step (6.7 hours for 2,000 steps).

Usage: check_scale.py BUILD_DIR [--ranks 8] [--steps 2000] [--window 500:1500] [--max-mb 50]
                      [--keep 4] [--scale 1] [--out DIR]
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time


def run_end(path):
    """The file's closing ranktime_run_end event (its last)."""
    opener = gzip.open if path.endswith(".gz") else open
    tail = ""
    with opener(path, "rt") as f:
        while block := f.read(1 << 20):
            tail = (tail + block)[-8192:]
    return json.loads("{" + tail.rsplit("\n{", 1)[1].rstrip().rstrip("]").rstrip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--window", default="500:1500")
    ap.add_argument("--max-mb", type=float, default=50)
    ap.add_argument("--keep", type=int, default=4)
    ap.add_argument("--workload", default="examples/workloads/bert_base.tsv")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="ranktime-scale-")
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "t.json")
    cmd = [os.path.join(a.build, "ranktime"), "run", "-np", str(a.ranks), "--timeline-filename", trace,
           "--timeline-steps", a.window, "--timeline-max-mb", str(a.max_mb),
           "--timeline-keep-files", str(a.keep), "--",
           os.path.join(a.build, "ranktime-synth"), "--quiet", "--no-verify", "--workload", a.workload,
           "--steps", str(a.steps), "--scale", str(a.scale)]
    env = dict(os.environ)  # the fusion settings' defaults are collective/src/core/settings.cc's
    for name, default in (("RANKTIME_FUSION_THRESHOLD", 64 << 20), ("RANKTIME_FUSION_MAX_TENSOR", 0)):
        value = int(env.get(name, default))  # 0 (off, no limit) stays 0
        env[name] = str(max(1, round(value * a.scale)) if value else 0)
    bound = a.keep * (a.max_mb * (1 << 20) + (512 << 10))
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = 0
    while p.poll() is None:
        peak = max(peak, sum(os.path.getsize(f) for f in glob.glob(os.path.join(out, "t*.json*"))
                             if os.path.exists(f)))
        time.sleep(0.5)
    stdout, stderr = p.communicate()
    if p.returncode != 0:
        sys.exit(f"the run failed ({p.returncode}):\n{stdout}\n{stderr}")
    files = sorted(glob.glob(os.path.join(out, "t*.json*")))
    dropped = 0
    for f in files:
        c = subprocess.run([os.path.join(a.build, "ranktime"), "check", f], capture_output=True, text=True)
        if c.returncode != 0:
            sys.exit(f"{f} does not pass check:\n{c.stdout}{c.stderr}")
        dropped += run_end(f)["args"]["events_dropped"]
    print(f"{a.ranks} ranks, {a.steps} steps (scale {a.scale:g}), window {a.window}, budget {a.max_mb} MiB, keep {a.keep}: "
          f"{time.time() - t0:.0f} s, {len(files)} files kept, peak disk use {peak / 2**20:.1f} MiB "
          f"(bound {bound / 2**20:.1f}), events dropped {dropped}")
    assert peak <= bound, f"disk use {peak} passed {bound}"
    assert dropped == 0, f"{dropped} events dropped"


if __name__ == "__main__":
    main()

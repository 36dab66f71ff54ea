"""Runs the soak workload under mpirun with the timeline on and checks it: every result correct,
no timeline event lost (events counted against the operations performed), memory flat.

Usage: check_soak.py SOAK_BIN RANKS STEPS TENSORS [--out DIR]
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("soak")
    ap.add_argument("ranks", type=int)
    ap.add_argument("steps", type=int)
    ap.add_argument("tensors", type=int)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="ranktime-soak-")
    trace = os.path.join(out, "soak.json")
    cmd = [os.environ.get("MPIRUN", "mpirun"), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           "-np", str(a.ranks), "-x", f"TIMELINE_FILENAME={trace}", a.soak, "--steps", str(a.steps),
           "--tensors", str(a.tensors)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.time() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    reports = [dict(kv.split("=") for kv in l.split()[1:]) for l in p.stdout.splitlines() if l.startswith("SOAK ")]
    assert len(reports) == a.ranks, p.stdout
    ops = sum(int(r["operations"]) for r in reports)
    assert ops == a.ranks * a.steps * a.tensors, f"operations {ops}"
    assert all(int(r["wrong"]) == 0 and int(r["failed"]) == 0 for r in reports)

    events = json.load(open(trace))
    counts = collections.Counter()
    for e in events:
        if e["ph"] != "X":
            continue
        if e["name"] == "ALLREDUCE":
            counts["op_slices"] += 1
        elif e["name"].startswith("NEGOTIATE_"):
            counts["negotiations"] += 1
        elif e["tid"] == 0 and e["name"].isdigit():
            counts["ticks"] += 1
    end = next(e for e in events if e.get("name") == "ranktime_run_end")
    dropped = end["args"]["events_dropped"]
    negotiations = a.steps * a.tensors
    assert dropped == 0, f"{dropped} events dropped"
    assert counts["op_slices"] == ops, counts
    assert counts["negotiations"] == negotiations, counts
    assert counts["ticks"] == negotiations * a.ranks, counts
    # Memory flat: after the first step (buffers and fusion buffer allocated), resident memory
    # must not keep growing. 10% slack for allocator noise.
    growth = max(int(r["rss_kib_last"]) / int(r["rss_kib_mid"]) for r in reports)
    peak = max(int(r["rss_kib_last"]) for r in reports)
    assert growth < 1.10, f"resident memory grew by {growth:.2f}x between mid-run and the end"
    print(f"soak ok: ranks={a.ranks} steps={a.steps} tensors/step={a.tensors} operations={ops} "
          f"events={len(events)} dropped={dropped} peak_rss_mib={peak/1024:.1f} growth={growth:.3f} "
          f"trace_mib={os.path.getsize(trace)/2**20:.1f} wall_s={wall:.1f}")


if __name__ == "__main__":
    sys.exit(main())

"""What-if cost against a real rerun (issue 34): ranktime-synth with one rank --delay-ms D late
(before its submissions, and inside backward: after half its tensors), then the same run with no
slow rank, in the same minutes (interleaved rounds). From the slow run's timeline, `ranktime
summary --format json` predicts what the slow rank cost per step (what_if); the rerun measures it:
the median step with the slow rank minus the median step without. Target: within 15% + 2 ms per
step. --compute-us makes communication overlap compute, as in training. The live column is rank
0's own replay while the slow run ran (ranktime.lateness()'s cost_per_step_us, which
ranktime-synth prints), held to the same target.

A benchmark, not a test: it prints a table (and the machine's load before and after).

Usage: whatif_bench.py BUILD_DIR [--ranks 2 4] [--delay-ms 10] [--steps 30] [--rounds 3]
                       [--tensors 40] [--elements 16384] [--compute-us 500]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile


def synth(build, ranks, args, timeline=None):
    """Runs ranktime-synth on `ranks` ranks; returns its median step (ms) and rank 0's live cost
    per step of each rank (ms)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    if timeline:
        cmd += ["-x", f"TIMELINE_FILENAME={timeline}"]
    cmd += [os.path.join(build, "ranktime-synth"), "--quiet", "--no-verify"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    live = re.search(r"live_cost_ms_per_step=([\d.,]*)", out).group(1)
    return (float(re.search(r"median_step_ms=([\d.]+)", out).group(1)),
            [float(x) for x in live.split(",") if x])


def predicted_ms_per_step(build, trace, rank):
    out = subprocess.run([os.path.join(build, "ranktime"), "summary", "--format", "json", trace],
                         capture_output=True, text=True, check=True).stdout
    w = json.loads(out)["what_if"]
    saving = next((r["saving_ms"] for r in w["ranks"] if r["rank"] == rank), 0.0)
    return saving / max(1, w["steps"]), w["replay_error_pct"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--delay-ms", type=float, default=10)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tensors", type=int, default=40)
    p.add_argument("--elements", type=int, default=16384)
    p.add_argument("--compute-us", type=float, default=500)
    a = p.parse_args()
    print(f"load before: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores)")
    common = ["--small-tensors", str(a.tensors), "--small-elements", str(a.elements),
              "--steps", str(a.steps), "--compute-us", str(a.compute_us)]
    print(f"{'ranks':>5} {'delay':>22} {'predicted/step':>15} {'live/step':>10} {'measured/step':>14} "
          f"{'|diff|':>8} {'bound':>7} {'replay err':>10}  ok  live ok")
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in a.ranks:
            slow = ranks - 1
            for where, extra in (("before backward", []),
                                 ("inside backward", ["--delay-after-tensors", str(a.tensors // 2)])):
                predicted, live, measured, errors = [], [], [], []
                for rnd in range(a.rounds):
                    trace = os.path.join(tmp, f"t{ranks}_{rnd}.json")
                    slow_args = common + ["--slow-rank", str(slow), "--delay-ms", str(a.delay_ms)] + extra
                    # Alternate which run goes first, so drift hits both alike.
                    runs = [("slow", slow_args), ("fast", common)]
                    if rnd % 2:
                        runs.reverse()
                    step = {}
                    for name, args in runs:
                        step[name], live_cost = synth(a.build, ranks, args, trace)
                        if name == "slow":
                            pred, err = predicted_ms_per_step(a.build, trace, slow)
                            live.append(live_cost[slow])
                        os.remove(trace)
                    predicted.append(pred)
                    errors.append(err)
                    measured.append(step["slow"] - step["fast"])
                pred, meas = statistics.median(predicted), statistics.median(measured)
                live_pred = statistics.median(live)
                bound = 0.15 * abs(meas) + 2
                ok = abs(pred - meas) <= bound
                live_ok = abs(live_pred - meas) <= bound
                all_ok = all_ok and ok and live_ok
                print(f"{ranks:>5} {f'{a.delay_ms:g} ms {where}':>22} {pred:>12.2f} ms {live_pred:>7.2f} ms "
                      f"{meas:>11.2f} ms {abs(pred - meas):>5.2f} ms {bound:>4.1f} ms {max(errors):>9.1f}%  "
                      f"{'yes' if ok else 'NO ':<3} {'yes' if live_ok else 'NO'}")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    print("all within the target" if all_ok else "some outside the target")


if __name__ == "__main__":
    main()

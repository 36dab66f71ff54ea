"""The metrics endpoint's cost: ranktime-synth's step time with RANKTIME_METRICS_ADDR off, and on
with a client scraping /metrics every second (as Prometheus would), in interleaved rounds (each
round runs both, in alternating order, so drift in machine load hits both alike). Prints each
variant's median step (the median over rounds of each run's median step), and the on/off ratio
paired within each round (median and range over rounds).

Usage: metrics_bench.py BUILD_DIR [--ranks 3] [--rounds 5] [--steps 300] [--small-tensors 50]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import threading
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_every_second(port, stop, counts):
    while not stop.wait(1):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                r.read()
                counts.append(1)
        except OSError:
            pass  # not listening yet, or the job has ended


def synth(build, args, ranks, port=None):
    """One run; its median step (ms) and the scrapes that answered."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
           str(ranks), "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]
    stop, counts, scraper = threading.Event(), [], None
    if port:
        cmd += ["-x", f"RANKTIME_METRICS_ADDR=127.0.0.1:{port}"]
        scraper = threading.Thread(target=scrape_every_second, args=(port, stop, counts))
        scraper.start()
    cmd += [os.path.join(build, "ranktime-synth"), "--quiet", "--no-verify"] + args
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    finally:
        stop.set()
        if scraper:
            scraper.join()
    return float(re.search(r"median_step_ms=([\d.]+)", out).group(1)), len(counts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--small-tensors", type=int, default=50)
    o = parser.parse_args()
    args = ["--small-tensors", str(o.small_tensors), "--steps", str(o.steps)]
    off, on, ratios, scrapes = [], [], [], 0
    for r in range(o.rounds):
        runs = {}
        for variant in (["off", "on"] if r % 2 == 0 else ["on", "off"]):
            step, answered = synth(o.build, args, o.ranks, free_port() if variant == "on" else None)
            runs[variant] = step
            scrapes += answered
        off.append(runs["off"])
        on.append(runs["on"])
        ratios.append(runs["on"] / runs["off"])
        print(f"round {r + 1}: off {runs['off']:.3f} ms, on + scraped {runs['on']:.3f} ms, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"{o.ranks} ranks, {o.small_tensors} small tensors, {o.steps} steps, {o.rounds} rounds")
    print(f"median step: off {statistics.median(off):.3f} ms, on + scraped every second "
          f"{statistics.median(on):.3f} ms ({scrapes} scrapes answered)")
    print(f"on/off paired per round: median {statistics.median(ratios):.3f}, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()

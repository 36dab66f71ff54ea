"""ResNet-50 steps on two emulated hosts of two ranks each, every host's link limited to a rate
(1 Gbit/s by default, tbf on both ends), against what the link allows.

What the link allows: the bytes that must cross it in each direction, divided by the rate. With
ranks 0,1 on h0 and 2,3 on h1, Open MPI 4.1's default allreduce for 4 ranks and more than 8 KiB
(coll/tuned's fixed decision) is Rabenseifner's: a reduce-scatter by recursive halving (partners
at distance 1, inside a host, exchange N/2; then at distance 2, across, N/4) and an allgather by
recursive doubling (across N/4, then inside N/2). Each of h0's two ranks sends N/4 + N/4 across,
so N bytes cross each way per step, N being the gradient bytes. That is also the least any
allreduce needs between two hosts (each host must learn the other's sum of N bytes). Ring sends
1.5 N across each way, recursive doubling 2 N; with --algorithms the bench forces each of them
as well, so the assumption about the default is checked against the clock and the bytes.

The bytes are also counted: tbf's "Sent" counters on both hosts' eth0, per step (launch, warm-up
and ranktime's own messages included, so slightly above the model). The payload bound adds TCP/IP
and Ethernet headers: at MTU 1500 with TCP timestamps, 1448 payload bytes per 1514 on the wire.

Needs root and `ip netns` (tests/multihost/cluster.py). Prints a table; asserts nothing.
Usage: multihost_bench.py [BUILD_DIR] [--rate 1gbit] [--steps 5] [--algorithms]
                          [--rank-env RANKTIME_ALLREDUCE_CHUNK=0]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "multihost"))
from cluster import Cluster, _rate_bits, unavailable_reason  # noqa: E402

# name, Open MPI's coll_tuned_allreduce_algorithm number (None: Open MPI's own choice), bytes
# across each way per step in units of N
ALGORITHMS = [("default (Open MPI's choice)", None, 1.0), ("rabenseifner (forced)", 6, 1.0),
              ("ring (forced)", 4, 1.5), ("recursive doubling (forced)", 3, 2.0)]
WIRE_EFFICIENCY = 1448 / 1514


def sent_bytes(cluster, host):
    """Bytes tbf on `host`'s eth0 has sent (what left the host), or 0 without a limit."""
    out = subprocess.run(["tc", "-n", cluster.namespace(host), "-s", "qdisc", "show", "dev",
                          "eth0"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Sent (\d+) bytes", out)
    return int(m.group(1)) if m else 0


def run_steps(cluster, build, args, algorithm):
    mca = []
    if algorithm is not None:
        mca = ["--mca", "coll_tuned_use_dynamic_rules", "1",
               "--mca", "coll_tuned_allreduce_algorithm", str(algorithm)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    before = {h: sent_bytes(cluster, h) for h in cluster.names}
    exported = [a for assignment in args.rank_env
                for a in ("--mpi-arg=-x", f"--mpi-arg={assignment}")]
    p = cluster.run([str(build / "ranktime"), "run", "-np", "4", "-H", cluster.host_list(),
                     *cluster.ranktime_args(), *mca, *exported, "--peer-timeout-seconds", "600",
                     "--",
                     str(build / "ranktime-synth"), "--workload", str(args.workload),
                     "--steps", str(args.steps), "--warmup", "1"],
                    env=env, timeout=1800)
    if p.returncode != 0 or "verify=ok" not in p.stdout:
        sys.exit(f"the job failed:\n{p.stdout}\n{p.stderr}")
    steps = [float(x) for x in re.findall(r"^step \d+: ([\d.]+) ms", p.stdout, re.M)]
    total = int(re.search(r" bytes=(\d+) ", p.stdout).group(1))
    crossed = {h: (sent_bytes(cluster, h) - before[h]) / (args.steps + 1) for h in cluster.names}
    return statistics.median(steps), min(steps), total, crossed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=str(ROOT / "build"))
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--workload", default=str(ROOT / "examples" / "workloads" / "resnet50.tsv"))
    ap.add_argument("--algorithms", action="store_true",
                    help="also force Rabenseifner, ring and recursive doubling")
    ap.add_argument("--no-unlimited", action="store_true", help="skip the run without a limit")
    ap.add_argument("--rank-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable for every rank, e.g. RANKTIME_ALLREDUCE_CHUNK=0 (repeat)")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"multihost_bench: {reason}")
    build = Path(args.build).resolve()
    rate_bytes = _rate_bits(args.rate) / 8

    with Cluster(hosts=2, slots=2) as cluster:
        if not args.no_unlimited:
            median, fastest, total, _ = run_steps(cluster, build, args, None)
            print(f"no limit: median step {median:.0f} ms (fastest {fastest:.0f} ms); this "
                  f"machine's floor for {total / 1e6:.1f} MB of gradients on 4 ranks")
        for host in cluster.names:
            cluster.rate(host, args.rate)
        print(f"\n2 hosts x 2 ranks, each host's link at {args.rate} (tbf both ends), "
              f"{args.steps} steps + 1 warm-up, N = gradient bytes "
              f"{' '.join(args.rank_env)}\n")
        print(f"{'allreduce':30} {'model':>7} {'bound ms':>9} {'+headers':>9} {'median ms':>10} "
              f"{'ratio':>6} {'h0 sent/step':>13} {'h1 sent/step':>13}")
        for name, number, across in ALGORITHMS if args.algorithms else ALGORITHMS[:1]:
            median, fastest, total, crossed = run_steps(cluster, build, args, number)
            bound_ms = across * total / rate_bytes * 1000
            wire_ms = bound_ms / WIRE_EFFICIENCY
            print(f"{name:30} {across:>5.1f} N {bound_ms:>9.0f} {wire_ms:>9.0f} {median:>10.0f} "
                  f"{median / bound_ms:>6.2f} {crossed['h0'] / total:>11.2f} N "
                  f"{crossed['h1'] / total:>11.2f} N")
        print(f"\nN = {total / 1e6:.1f} MB; bound = model x N / rate; +headers: at 1448 payload "
              f"bytes per 1514 on the wire; ratio = median / bound")


if __name__ == "__main__":
    main()

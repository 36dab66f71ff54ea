#!/usr/bin/env python3
"""What one Python region costs, `with ranktime.region(name):` and a `@ranktime.region(name)`
function call, against the same loop without it, in the same run, timeline on (one rank):

    PYTHONPATH=build/python /usr/bin/python3 bench/region_bench.py [--iterations N]

Prints ns per iteration and the region's cost above the empty loop (the C++ side:
build/bench/region_bench).
"""

import argparse
import os
import statistics
import tempfile
import time

import ranktime

NAMES = ("data", "forward", "backward", "optimizer")


def ns_per(n, body):
    """ns per iteration of body(n), the median of 5 rounds."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        body(n)
        rounds.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(rounds)


def empty(n):
    for i in range(n):
        NAMES[i & 3]


def with_region(n):
    region = ranktime.region
    for i in range(n):
        with region(NAMES[i & 3]):
            pass


@ranktime.region("forward")
def decorated():
    pass


def plain():
    pass


def calls_decorated(n):
    for _ in range(n):
        decorated()


def calls_plain(n):
    for _ in range(n):
        plain()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100000)
    args = parser.parse_args()
    path = os.path.join(tempfile.gettempdir(), "region_bench_py.json")
    os.environ["TIMELINE_FILENAME"] = path
    ranktime.init()
    base = ns_per(args.iterations, empty)
    inside = ns_per(args.iterations, with_region)
    call = ns_per(args.iterations, calls_plain)
    wrapped = ns_per(args.iterations, calls_decorated)
    ranktime.shutdown()
    print("region_bench.py: empty loop %.0f ns/iteration" % base)
    print("  with ranktime.region(name): %.0f ns (%.0f above the empty loop, %.2f us)"
          % (inside, inside - base, (inside - base) / 1000))
    print("  @ranktime.region call: %.0f ns against %.0f for the plain call (%.0f above, %.2f us)"
          % (wrapped, call, wrapped - call, (wrapped - call) / 1000))


if __name__ == "__main__":
    main()

"""Shared pieces of the multihost tests: the binaries, the skip when namespaces cannot be made, and
a `cluster` fixture (hosts brought up for one test and always brought down after it).

ctest passes the binaries in RANKTIME_CLI and RANKTIME_SYNTH; run by hand, the tests look in
./build. Where the emulated cluster cannot exist (not root, no `ip netns`), the whole session
exits with status 77, which ctest reports as skipped, and says why.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import Cluster, unavailable_reason  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SKIP_STATUS = 77


def _binary(variable, name):
    path = os.environ.get(variable) or str(ROOT / "build" / name)
    return path if os.access(path, os.X_OK) else None


CLI = _binary("RANKTIME_CLI", "ranktime")
SYNTH = _binary("RANKTIME_SYNTH", "ranktime-synth")
WORKLOADS = ROOT / "examples" / "workloads"
# As in the other multi-rank tests: shared-memory single copy (CMA) needs ptrace rights that
# containers often lack; copying through the shared segment works everywhere.
ENV = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


SANITIZER_OPTIONS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")


def pytest_sessionstart(session):
    reason = unavailable_reason()
    if reason:
        print(f"\nSKIPPED: multihost tests: {reason}", flush=True)
        pytest.exit(reason, returncode=SKIP_STATUS)
    if CLI is None or SYNTH is None:
        pytest.exit("ranktime or ranktime-synth not built (set RANKTIME_CLI, RANKTIME_SYNTH)",
                    returncode=1)


@pytest.fixture
def cluster(request):
    """Two hosts of two slots; @pytest.mark.cluster(hosts=.., slots=.., host_env=..) changes it."""
    marker = request.node.get_closest_marker("cluster")
    with Cluster(**(marker.kwargs if marker else {})) as c:
        yield c


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster(**kwargs): arguments for the cluster fixture")


def ranktime_run(cluster, np_, program, *run_args, placement=None, timeout=300, cwd=None):
    """`ranktime run -np N -H h0:S,... <the cluster's options> RUN_ARGS -- PROGRAM` on the cluster
    (placement: instead of -H, e.g. ["--hostfile", cluster.hostfile])."""
    placement = placement or ["-H", cluster.host_list()]
    # A host's processes start with a clean environment, as over ssh: sanitizer settings (the
    # sanitizer job's) reach the ranks only when exported.
    exported = [a for name in SANITIZER_OPTIONS if name in os.environ
                for a in ("--mpi-arg=-x", f"--mpi-arg={name}")]
    args = [CLI, "run", "-np", str(np_), *placement, *cluster.ranktime_args(), *exported,
            *map(str, run_args), "--", *map(str, program)]
    return cluster.run(args, timeout=timeout, env=ENV, cwd=cwd)


def run_metadata(trace):
    """The `ranktime_run` metadata event's args."""
    for event in json.loads(Path(trace).read_text()):
        if event.get("name") == "ranktime_run":
            return event["args"]
    raise AssertionError(f"{trace} has no ranktime_run metadata")


def check_trace(trace, closed_cleanly=True):
    """`ranktime check TRACE` passes (and, unless told otherwise, says the file closed cleanly)."""
    p = subprocess.run([CLI, "check", str(trace)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    if closed_cleanly:
        assert "closed cleanly" in p.stdout, p.stdout


def summary_json(trace, *args):
    p = subprocess.run([CLI, "summary", str(trace), "--format", "json", *args],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def wait_until(condition, timeout_s=20):
    """Polls `condition` until it holds or `timeout_s` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()

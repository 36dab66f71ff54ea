"""The emulated cluster itself: hosts with their own names, addresses and variables, the transport
Open MPI picks inside and between hosts, a launch onto a cut host, a rate-limited link, and the
cleanup after a test that fails or is killed."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cluster import Cluster, HOSTS_FILE, PREFIX
from conftest import ENV, SYNTH, ranktime_run, wait_until

HERE = Path(__file__).resolve().parent

SHOW_HOST = ("echo HOST $OMPI_COMM_WORLD_RANK $(hostname) $(ip -4 -o addr show dev eth0 | "
             "awk '{print $4}') skew=${RANKTIME_TEST_CLOCK_SKEW_US-unset} "
             "leaked=${MH_NOT_PASSED-unset} passed=${MH_PASSED-unset}")


@pytest.mark.cluster(hosts=2, slots=2, host_env={"h1": {"RANKTIME_TEST_CLOCK_SKEW_US": "-50000"}})
def test_each_host_has_its_name_address_and_variables(cluster):
    p = cluster.run(["mpirun", "--allow-run-as-root", "-np", "4", "-H", cluster.host_list(),
                     *cluster.mpirun_args(), "-x", "MH_PASSED=yes", "sh", "-c", SHOW_HOST],
                    env=dict(ENV, MH_NOT_PASSED="yes"), timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    seen = sorted(line.split()[1:] for line in p.stdout.splitlines() if line.startswith("HOST "))
    # Ranks fill h0's slots first. Only -x variables and the host's own reach a rank, as over ssh.
    assert seen == [[str(rank), host, cluster.address(host) + "/24", skew, "leaked=unset",
                     "passed=yes"]
                    for rank, host, skew in [(0, "h0", "skew=unset"), (1, "h0", "skew=unset"),
                                             (2, "h1", "skew=-50000"), (3, "h1", "skew=-50000")]]


def test_shared_memory_inside_a_host_tcp_between_hosts(cluster, tmp_path):
    p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "4", "--steps", "2"],
                     "--mca", "btl_base_verbose", "100", "--verbose",
                     placement=["--hostfile", cluster.hostfile], cwd=tmp_path, timeout=180)
    # A hostfile naming two hosts: `ranktime run` sets mpirun's keepalive by itself.
    assert "--mca oob_tcp_keepalive_time 5" in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    # [h0:1234] mca: bml: Using vader btl for send to [[9062,1],1] on node h0
    choices = re.findall(
        r"^\[(h\d+):\d+\] mca: bml: Using (\w+) btl for send to \S+ on node (h\d+)",
        p.stdout + p.stderr, re.M)
    by_pair = {}
    for source, btl, target in choices:
        by_pair.setdefault((source, target), set()).add(btl)
    assert by_pair.get(("h0", "h0")) and by_pair.get(("h0", "h1")), p.stdout + p.stderr
    for (source, target), btls in by_pair.items():
        expected = {"vader", "self"} if source == target else {"tcp"}
        assert btls <= expected and btls & {"vader", "tcp"}, (source, target, btls)


def test_a_launch_onto_a_cut_host_fails_instead_of_hanging(cluster, tmp_path):
    cluster.cut("h1")
    started = time.monotonic()
    # A hang is bounded by the timeout, and then fails the test.
    p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "4", "--steps", "2"], cwd=tmp_path,
                     timeout=120)
    took = time.monotonic() - started
    assert p.returncode != 0, p.stdout + p.stderr
    assert "connect to host h1 (10.213.57.2): host unreachable" in p.stderr, p.stderr
    print(f"the launch failed after {took:.1f} s")
    # Nothing of that job is left on the host that could be reached.
    assert wait_until(lambda: not cluster.host_processes("h0")), cluster.host_processes("h0")

    cluster.heal("h1")
    p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "4", "--steps", "2"], cwd=tmp_path,
                     timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "verify=ok" in p.stdout


def test_rate_limits_both_ends_of_a_link(cluster):
    def shaping():
        outside = subprocess.run(["tc", "qdisc", "show", "dev", cluster.veth("h1")],
                                 capture_output=True, text=True, check=True).stdout
        inside = subprocess.run(["tc", "-n", cluster.namespace("h1"), "qdisc", "show", "dev",
                                 "eth0"], capture_output=True, text=True, check=True).stdout
        return [re.search(r"tbf .*rate (\S+)", text) for text in (outside, inside)]

    cluster.rate("h1", "1gbit")
    assert [m and m.group(1) for m in shaping()] == ["1Gbit", "1Gbit"]
    cluster.unrate("h1")
    assert shaping() == [None, None]


# A test body in a child process: brings up a cluster, starts a job that would run for ten
# minutes, prints what it started, then ends the way the parameter says.
CHILD = textwrap.dedent("""\
    import json, os, signal, subprocess, sys, time
    sys.path.insert(0, {here!r})
    from cluster import Cluster
    with Cluster(hosts=2, slots=1) as c:
        job = c.popen(["mpirun", "--allow-run-as-root", "-np", "2", "-H", c.host_list(),
                       *c.mpirun_args(), "sleep", "600"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
        while len(c.host_processes()) < 4:  # an orted and a sleep on each host
            time.sleep(0.1)
        print(json.dumps({{"job": job.pid, "hosts": list(c.host_processes()),
                          "namespaces": [c.namespace(h) for h in c.names]}}), flush=True)
        if {how!r} == "fails":
            raise AssertionError("the test failed")
        time.sleep(600)  # killed here
""")


@pytest.mark.parametrize("how", ["fails", "sigterm", "sigkill"])
def test_nothing_is_left_behind(tmp_path, how):
    hosts_before = HOSTS_FILE.read_text()
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(here=str(HERE), how=how)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = json.loads(child.stdout.readline())
        assert all(os.path.exists(f"/run/netns/{ns}") for ns in started["namespaces"])
        assert HOSTS_FILE.read_text() != hosts_before
        if how != "fails":
            child.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    if how == "sigkill":
        # Nobody cleaned up: the next cluster (or `cluster.py cleanup`) does it first.
        assert all(os.path.exists(f"/run/netns/{ns}") for ns in started["namespaces"])
        Cluster(hosts=1).down()
    pids = [started["job"]] + started["hosts"]
    assert wait_until(lambda: not [p for p in pids if alive(p)]), [p for p in pids if alive(p)]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert PREFIX not in namespaces
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert PREFIX not in links
    assert HOSTS_FILE.read_text() == hosts_before


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

"""An emulated cluster on one Linux machine, for the multihost tests: hosts h0..hN-1 are network
namespaces on a bridge, reached by Open MPI through an rsh agent. Needs root and `ip netns`.

Each host hI is a namespace with eth0 at NET.(I+1), joined by a veth pair to a bridge in the root
namespace that holds NET.254, so mpirun (in the root namespace) reaches every daemon. The names
are in /etc/hosts while the cluster is up. Open MPI launches its daemons through the agent
written for this run (`AGENT HOST CMD...`, like ssh): it probes the host, exits 255 when the host
does not answer, and otherwise runs CMD in the host's namespace with hostname HOST and a cleared
environment plus the host's own variables (a clock skew, say).

Only one cluster exists at a time (a lock file). Everything is named with a per-run prefix
(rtmh<id>...), ended by pid and removed on exit, on SIGTERM/SIGINT, and, for a run that was
killed outright, by the next run (or `cluster.py cleanup`) before it starts.

    from cluster import Cluster
    with Cluster(hosts=2, slots=2) as c:
        c.run(["ranktime", "run", "-np", "4", "-H", c.host_list(), *c.ranktime_args(), "--", ...])

From a shell (see docs/multihost.md): up, down, cut, heal, rate, status, cleanup, run.
"""
import argparse
import errno
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# A private /24 unlikely to be in use; RANKTIME_MH_NET overrides (a.b.c, no mask).
DEFAULT_NET = "10.213.57"
PREFIX = "rtmh"  # every namespace, link and state directory of the harness starts with it
STATE_ROOT = Path(os.environ.get("RANKTIME_MH_STATE", "/run/ranktime-multihost"))
LOCK_FILE = STATE_ROOT.parent / "ranktime-multihost.lock"
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARK = "# ranktime-multihost"  # appended to every /etc/hosts line the harness adds
# What a host's processes see as PATH and HOME: the agent clears everything else, as ssh would.
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROBE_TIMEOUT_S = 2  # the agent's reachability probe; ssh's ConnectTimeout plays this part


def mca_settings(net):
    """Open MPI settings that a job on the emulated hosts needs (docs/multihost.md says why)."""
    return [
        ("plm_rsh_no_tree_spawn", "1"),  # daemons are started by mpirun, not by each other
        ("oob_tcp_if_include", f"{net}.0/24"),
        ("btl_tcp_if_include", f"{net}.0/24"),
        ("btl", "self,vader,tcp"),
        # The hosts share this machine's cores. Open MPI spins while it waits unless it knows a
        # node is oversubscribed, which slots=4 on an emulated host does not tell it; 32 spinning
        # ranks on 2 cores take minutes for what takes seconds when they yield.
        ("mpi_yield_when_idle", "1"),
    ]


def keepalive_settings():
    """What `ranktime run` adds by itself when it names more than one host (kMultiHostMca in
    launcher/run_command.cc), for a bare mpirun."""
    return [("oob_tcp_keepalive_time", "5"), ("oob_tcp_keepalive_intvl", "2"),
            ("oob_tcp_keepalive_probes", "3")]


def unavailable_reason():
    """Why namespaces cannot be made here (a skip reason), or None when they can."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces, /etc/hosts)"
    for tool in ("ip", "tc", "unshare", "timeout", "mpirun"):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs `{tool}`, which is not installed"
    # What up() does, in small: a namespace, a bridge, a veth pair between them.
    probe = f"{PREFIX}p{os.getpid() % 100000}"
    steps = [["netns", "add", probe], ["link", "add", probe + "b", "type", "bridge"],
             ["link", "add", probe + "v", "type", "veth", "peer", "name", "eth0", "netns", probe],
             ["link", "set", probe + "v", "master", probe + "b"]]
    try:
        for step in steps:
            made = _ip(*step, check=False)
            if made.returncode != 0:
                return f"cannot make an emulated host here (`ip {' '.join(step)}`): " \
                       f"{made.stderr.strip()}"
        return None
    finally:
        _ip("link", "del", probe + "v", check=False)
        _ip("link", "del", probe + "b", check=False)
        _ip("netns", "del", probe, check=False)


def _ip(*args, ns=None, check=True):
    cmd = ["ip"] + (["-n", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


def _stat(pid):
    """(state, process group, start time) of `pid` from /proc, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2]), int(fields[19])


def _process_start(pid):
    """The start time of `pid` (clock ticks since boot), to tell a process from a reused pid."""
    st = _stat(pid)
    return st[2] if st else None


def _live(pid, start):
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[2] == start


def _group_members(pgid):
    return [int(e) for e in os.listdir("/proc")
            if e.isdigit() and (st := _stat(int(e))) and st[1] == pgid and st[0] != "Z"]


def _end(pids, grace_s=3.0, groups=False):
    """Ends processes by pid: SIGTERM, then SIGKILL whoever is left after grace_s.

    pids: {pid: start time}. groups: each pid leads a process group (mpirun and the like, started
    by Cluster.popen) and the whole group is ended, also when its leader has already gone."""
    def members(pid, start):
        if not groups:
            return [pid] if _live(pid, start) else []
        # A pid number stays taken while a group uses it, so a group whose leader has exited is
        # still ours; a different process under that number means our group is gone.
        st = _stat(pid)
        return _group_members(pid) if st is None or st[2] == start else []

    def signal_all(sig):
        for pid, start in pids.items():
            try:
                if members(pid, start):
                    (os.killpg if groups else os.kill)(pid, sig)
            except ProcessLookupError:
                pass

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(members(p, s) for p, s in pids.items()):
        time.sleep(0.05)
    signal_all(signal.SIGKILL)


def _namespace_pids(ns):
    """{pid: start time} of every process in network namespace `ns` (what `ip netns pids` says)."""
    try:
        target = os.stat(f"/run/netns/{ns}")
    except OSError:
        return {}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
            found[int(entry)] = _process_start(int(entry))
    return found


def _our_namespaces():
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _our_links():
    out = _ip("-o", "link", "show", check=False).stdout
    names = [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)[:@]", out, re.M)]
    return [n for n in names if n.startswith(PREFIX)]


def _remove_hosts_lines():
    """Takes the harness's lines out of /etc/hosts, in place (it may be a bind mount)."""
    try:
        text = HOSTS_FILE.read_text()
    except OSError:
        return
    lines = text.splitlines(keepends=True)
    kept = [l for l in lines if HOSTS_MARK not in l]
    if len(kept) != len(lines):
        with open(HOSTS_FILE, "r+") as f:
            f.write("".join(kept))
            f.truncate()


def cleanup_everything():
    """Removes every trace of any run: its processes (by pid), namespaces, links, /etc/hosts lines
    and state. Call it holding the lock (Cluster does), so that no live run is torn down."""
    states = sorted(STATE_ROOT.glob(f"{PREFIX}*/state.json")) if STATE_ROOT.is_dir() else []
    launched = {}
    for state in states:
        try:
            launched.update({int(p): s for p, s in json.loads(state.read_text())["launched"]})
        except (OSError, ValueError, KeyError):
            pass
    _end(launched, groups=True)  # mpirun and `ranktime run` first: nothing relaunches after
    namespaces = _our_namespaces()
    in_namespaces = {}
    for ns in namespaces:
        in_namespaces.update(_namespace_pids(ns))
    _end(in_namespaces, grace_s=1.0)
    for link in _our_links():
        _ip("link", "del", link, check=False)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    _remove_hosts_lines()
    for state in states:
        shutil.rmtree(state.parent, ignore_errors=True)


class ClusterBusy(RuntimeError):
    pass


class Cluster:
    """N emulated hosts with `slots` ranks each; a context manager (up on enter, down on exit).

    host_env: {host name: {variable: value}} added to that host's processes (rank environment).
    manual: the cluster outlives this process (`cluster.py up`); `down` or `cleanup` removes it.
    """

    def __init__(self, hosts=2, slots=2, host_env=None, net=None, manual=False):
        if not 1 <= hosts <= 200:
            raise ValueError(f"hosts must be 1..200 (got {hosts})")
        self.names = [f"h{i}" for i in range(hosts)]
        self.slots = slots
        self.host_env = {h: dict((host_env or {}).get(h, {})) for h in self.names}
        unknown = set(host_env or {}) - set(self.names)
        if unknown:
            raise ValueError(f"host_env names hosts that do not exist: {sorted(unknown)}")
        self.net = net or os.environ.get("RANKTIME_MH_NET", DEFAULT_NET)
        ipaddress.ip_network(f"{self.net}.0/24")  # a bad RANKTIME_MH_NET fails here
        self.manual = manual
        self.run_id = secrets.token_hex(2)
        self.dir = STATE_ROOT / f"{PREFIX}{self.run_id}"
        self.bridge = f"{PREFIX}{self.run_id}br"
        self.launched = {}
        self._lock = None
        self._old_handlers = {}

    # names of one host's pieces
    def namespace(self, host):
        return f"{PREFIX}{self.run_id}-{host}"

    def veth(self, host):  # the bridge side (root namespace); the host side is eth0
        return f"{PREFIX}{self.run_id}{host}"

    def address(self, host):
        return f"{self.net}.{self.names.index(host) + 1}"

    @property
    def agent(self):
        return str(self.dir / "agent")

    @property
    def hostfile(self):
        return str(self.dir / "hostfile")

    def host_list(self, slots=None):
        """-H's value: h0:2,h1:2,..."""
        return ",".join(f"{h}:{slots or self.slots}" for h in self.names)

    def mca(self):
        return [("plm_rsh_agent", self.agent)] + mca_settings(self.net)

    def ranktime_args(self):
        """`ranktime run` options for this cluster (it adds the keepalive settings itself)."""
        return [a for name, value in self.mca() for a in ("--mca", name, value)]

    def mpirun_args(self):
        """The same for a bare mpirun, keepalive settings included."""
        return [a for name, value in self.mca() + keepalive_settings()
                for a in ("--mca", name, value)]

    # bringing up and down
    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        self._take_lock()
        try:
            self._refuse_a_manual_cluster()
        except BaseException:
            self._release_lock()
            raise
        try:
            cleanup_everything()  # leftovers of a run that was killed
            if not self.manual:
                self._trap_signals()
            self._write_state()  # first, so that a crash from here on is found and cleaned
            self._make_network()
            self._add_hosts_lines()
            self._write_hostfile_and_agent()
        except BaseException:
            self.down()
            raise
        if self.manual:
            self._release_lock()

    def down(self):
        if self._lock is None:
            self._take_lock()
        try:
            cleanup_everything()
        finally:
            self._restore_signals()
            self._release_lock()

    def _take_lock(self, wait_s=600):
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        lock = open(LOCK_FILE, "a")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    lock.close()
                    raise ClusterBusy(f"another emulated cluster holds {LOCK_FILE}") from e
                time.sleep(0.2)
        self._lock = lock

    def _release_lock(self):
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _refuse_a_manual_cluster(self):
        for state in STATE_ROOT.glob(f"{PREFIX}*/state.json"):
            try:
                manual = json.loads(state.read_text()).get("manual")
            except (OSError, ValueError):
                continue
            if manual:
                raise ClusterBusy("an emulated cluster brought up with `cluster.py up` is still "
                                  "up; remove it with `cluster.py down`")

    def _trap_signals(self):
        # SIGTERM (ctest, a batch system) unwinds through down() as Ctrl-C does; pytest then runs
        # the fixtures' teardown and stops.
        def stop(sig, frame):
            raise KeyboardInterrupt(f"signal {sig}")
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, stop)

    def _restore_signals(self):
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers = {}

    def _write_state(self):
        self.dir.mkdir(parents=True)
        state = {"manual": self.manual, "hosts": self.names, "slots": self.slots,
                 "net": self.net, "run_id": self.run_id, "host_env": self.host_env,
                 "launched": [[p, s] for p, s in self.launched.items()]}
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.rename(self.dir / "state.json")

    def _make_network(self):
        taken = _ip("-4", "-o", "addr", "show", check=False).stdout
        if re.search(rf"\binet {re.escape(self.net)}\.\d+/", taken):
            raise RuntimeError(f"{self.net}.0/24 is already in use on this machine; choose "
                               f"another with RANKTIME_MH_NET")
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.names:
            ns, veth = self.namespace(host), self.veth(host)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("addr", "add", f"{self.address(host)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def _add_hosts_lines(self):
        text = HOSTS_FILE.read_text()
        lines = "".join(f"{self.address(h)} {h} {HOSTS_MARK} {self.run_id}\n" for h in self.names)
        with open(HOSTS_FILE, "a") as f:
            # A file without a final newline gets one; removing our lines leaves it there.
            f.write(("" if text.endswith("\n") or not text else "\n") + lines)

    def _write_hostfile_and_agent(self):
        Path(self.hostfile).write_text("".join(f"{h} slots={self.slots}\n" for h in self.names))
        self.write_agent()

    def write_agent(self):
        """(Re)writes the rsh agent, with each host's namespace, address and variables."""
        addresses = "\n".join(f"  {h}) addr={self.address(h)} ;;" for h in self.names)
        launches = []
        for h in self.names:
            env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.host_env[h].items()))
            launches.append(f"  {h}) exec ip netns exec {self.namespace(h)} unshare --uts -- "
                            f"env -i PATH={HOST_PATH} HOME=/root {env} {HOST_SHELL} ;;")
        text = AGENT_TEMPLATE.format(addresses=addresses, launches="\n".join(launches),
                                     timeout=PROBE_TIMEOUT_S)
        tmp = Path(self.agent + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.rename(self.agent)

    def set_env(self, host, name, value):
        """Adds NAME=VALUE to `host`'s processes from the next launch on."""
        self.host_env[host][name] = str(value)
        self.write_agent()

    # faults
    def cut(self, host):
        """A pulled cable: the bridge side of the host's veth goes down."""
        _ip("link", "set", self.veth(host), "down")

    def heal(self, host):
        _ip("link", "set", self.veth(host), "up")

    def rate(self, host, rate="1gbit"):
        """A slow link: tbf at `rate` on both ends of the host's veth (each shapes what it sends).

        The bucket holds 1 ms at that rate (at least 64 KiB, one segmentation-offload packet) and
        the queue 100 ms, so TCP sees the rate rather than drops."""
        bits = _rate_bits(rate)
        burst = max(bits // 8 // 1000, 65536)
        args = ["root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]
        for ns, dev in ((None, self.veth(host)), (self.namespace(host), "eth0")):
            cmd = ["tc"] + (["-n", ns] if ns else []) + ["qdisc", "replace", "dev", dev] + args
            subprocess.run(cmd, check=True, capture_output=True)

    def unrate(self, host):
        for ns, dev in ((None, self.veth(host)), (self.namespace(host), "eth0")):
            cmd = ["tc"] + (["-n", ns] if ns else []) + ["qdisc", "del", "dev", dev, "root"]
            subprocess.run(cmd, capture_output=True)

    # processes
    def popen(self, args, **kwargs):
        """Starts a process (mpirun, `ranktime run`) in its own session and records its pid, so
        that down() or a later run ends it even if this process is killed."""
        p = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.launched[p.pid] = _process_start(p.pid)
        self._write_launched()
        return p

    def run(self, args, timeout=300, **kwargs):
        """popen + wait; on timeout the process's group is killed and TimeoutExpired raised."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        if kwargs.pop("capture_output"):
            kwargs.setdefault("stdout", subprocess.PIPE)
            kwargs.setdefault("stderr", subprocess.PIPE)
        p = self.popen(args, **kwargs)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(args, timeout, out, err)
        return subprocess.CompletedProcess(args, p.returncode, out, err)

    def kill(self, p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def host_processes(self, host=None):
        """{pid: start time} of the processes inside one host (or all hosts)."""
        found = {}
        for h in [host] if host else self.names:
            found.update(_namespace_pids(self.namespace(h)))
        return found

    def _write_launched(self):
        state_file = self.dir / "state.json"
        state = json.loads(state_file.read_text())
        state["launched"] = [[p, s] for p, s in self.launched.items()]
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.rename(state_file)

    @classmethod
    def attach(cls):
        """The cluster that `cluster.py up` left up (for the shell commands)."""
        states = sorted(STATE_ROOT.glob(f"{PREFIX}*/state.json"))
        if not states:
            raise RuntimeError("no emulated cluster is up (`cluster.py up` brings one up)")
        s = json.loads(states[0].read_text())
        c = cls(hosts=len(s["hosts"]), slots=s["slots"], host_env=s["host_env"], net=s["net"],
                manual=s["manual"])
        c.run_id = s["run_id"]
        c.dir = states[0].parent
        c.bridge = f"{PREFIX}{c.run_id}br"
        return c


def _rate_bits(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r}: expected e.g. 1gbit, 100mbit")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)])


# The rsh agent: `AGENT HOST CMD...`, as Open MPI calls ssh. Open MPI joins CMD's words with
# spaces for a shell, as ssh does, so "$*" is the command line. Exit status 255 means, as with
# ssh, that the host could not be reached.
# Inside the host: set the hostname (the UTS namespace is the process's own), then run the command
# line. $0 is the host name, $1 the command line.
HOST_SHELL = """/bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*\""""
AGENT_TEMPLATE = """#!/bin/sh
# Open MPI rsh agent for the emulated hosts (written by tests/multihost/cluster.py).
host=$1
shift
case "$host" in
{addresses}
  *) echo "agent: unknown emulated host '$host'" >&2; exit 255 ;;
esac
# Probe like ssh's connect: a port with no listener answers with a reset when the host is there.
probe=$(timeout {timeout} bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1)
case $?:$probe in
  0:*|*refused*) ;;
  *) echo "agent: connect to host $host ($addr): host unreachable" >&2; exit 255 ;;
esac
case "$host" in
{launches}
esac
"""


def main(argv=None):
    ap = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    helps = {"up": "bring a cluster up (until `down`)",
             "run": "bring a cluster up, run CMD on it, bring it down"}
    for name in ("up", "run"):
        p = sub.add_parser(name, help=helps[name])
        p.add_argument("-n", "--hosts", type=int, default=2)
        p.add_argument("--slots", type=int, default=2)
        p.add_argument("--env", action="append", default=[], metavar="HOST:NAME=VALUE",
                       help="a variable for one host's processes (repeat)")
        if name == "run":
            p.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("down", help="bring the cluster down")
    sub.add_parser("cleanup", help="remove what a killed run left behind (not a cluster that "
                                   "`up` brought up)")
    sub.add_parser("status", help="hosts, hostfile, agent, and the options for ranktime run")
    for name in ("cut", "heal", "unrate"):
        sub.add_parser(name).add_argument("host")
    p = sub.add_parser("rate", help="limit a host's link (tbf on both ends)")
    p.add_argument("host")
    p.add_argument("rate", help="e.g. 1gbit")
    a = ap.parse_args(argv)

    reason = unavailable_reason()
    if reason:
        print(f"cluster.py: {reason}", file=sys.stderr)
        return 77
    if a.cmd in ("up", "run"):
        host_env = {}
        for item in a.env:
            host, _, assignment = item.partition(":")
            name, eq, value = assignment.partition("=")
            if not eq or not name:
                ap.error(f"--env {item}: expected HOST:NAME=VALUE")
            host_env.setdefault(host, {})[name] = value
        c = Cluster(hosts=a.hosts, slots=a.slots, host_env=host_env, manual=a.cmd == "up")
        if a.cmd == "up":
            c.up()
            print_status(c)
            return 0
        command = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not command:
            ap.error("run: give a command after --")
        with c:
            # The command finds the cluster in the environment; OMPI_MCA_* reach a bare mpirun.
            env = dict(os.environ, RANKTIME_MH_HOSTS=c.host_list(), RANKTIME_MH_HOSTFILE=c.hostfile,
                       RANKTIME_MH_AGENT=c.agent,
                       RANKTIME_MH_RANKTIME_ARGS=" ".join(map(shlex.quote, c.ranktime_args())))
            env.update({f"OMPI_MCA_{k}": v for k, v in c.mca() + keepalive_settings()})
            p = c.popen(command, env=env)
            try:
                return p.wait()
            finally:
                c.kill(p)
    if a.cmd == "cleanup" and any(json.loads(f.read_text()).get("manual")
                                  for f in STATE_ROOT.glob(f"{PREFIX}*/state.json")):
        print("cluster.py: a cluster brought up with `up` is up; `down` removes it")
        return 0
    if a.cmd in ("down", "cleanup"):
        Cluster(hosts=1).down()
        return 0
    c = Cluster.attach()
    if a.cmd == "status":
        print_status(c)
    elif a.cmd == "rate":
        c.rate(a.host, a.rate)
    else:
        getattr(c, a.cmd)(a.host)
    return 0


def print_status(c):
    print(f"hosts: {' '.join(f'{h}={c.address(h)}' for h in c.names)} (slots {c.slots})")
    print(f"hostfile: {c.hostfile}")
    print(f"agent: {c.agent}")
    options = " ".join(map(shlex.quote, c.ranktime_args()))
    print(f"ranktime run -np N -H {c.host_list()} {options} -- PROGRAM")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ClusterBusy, RuntimeError, ValueError) as e:
        sys.exit(f"cluster.py: {e}")

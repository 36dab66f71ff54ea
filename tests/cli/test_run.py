"""`ranktime run`: the exact mpirun command for each flag (golden --dry-run output), bad input,
argument quoting through a real mpirun, exit status and signal forwarding."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CLI, ranktime

ROOT_USER = os.geteuid() == 0
NPROC = os.cpu_count() or 1


@pytest.fixture
def fake_mpirun(tmp_path):
    """An executable standing in for mpirun: records that it ran."""
    path = tmp_path / "bin" / "mpirun"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\necho ran > \"$(dirname \"$0\")/ran\"\n")
    path.chmod(0o755)
    return path


def golden(text, mpirun, directory):
    """Fills in what depends on the machine: mpirun's path, root, the temporary directory."""
    root_env = "OMPI_ALLOW_RUN_AS_ROOT=1\nOMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n" if ROOT_USER else ""
    return (text.replace("{MPIRUN}", str(mpirun))
            .replace("{ROOT_ENV}\n", root_env)
            .replace(" {ROOT}", " --allow-run-as-root" if ROOT_USER else "")
            .replace("{DIR}", str(directory)))


# flags -> the expected --dry-run output, for `... -- /bin/echo hi`.
GOLDEN = {
    "plain": (["-np", "1"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 1 --bind-to none /bin/echo hi
"""),
    "timeline": (["-np", "1", "--timeline-filename", "{DIR}/t.json"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
TIMELINE_FILENAME={DIR}/t.json
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x TIMELINE_FILENAME={DIR}/t.json /bin/echo hi
"""),
    "relative_timeline": (["-np", "1", "--timeline-filename", "sub/../t.json"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
TIMELINE_FILENAME={DIR}/t.json
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x TIMELINE_FILENAME={DIR}/t.json /bin/echo hi
"""),
    "mark_cycles": (["-np", "1", "--timeline-mark-cycles"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
TIMELINE_MARK_CYCLES=1
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x TIMELINE_MARK_CYCLES=1 /bin/echo hi
"""),
    "no_all_ranks": (["-np", "1", "--no-timeline-all-ranks"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
TIMELINE_ALL_RANKS=0
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x TIMELINE_ALL_RANKS=0 /bin/echo hi
"""),
    "fusion": (["-np", "1", "--fusion-threshold-mb", "64"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_FUSION_THRESHOLD=67108864
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_FUSION_THRESHOLD=67108864 /bin/echo hi
"""),
    "fusion_fraction": (["-np", "1", "--fusion-threshold-mb", "0.5"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_FUSION_THRESHOLD=524288
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_FUSION_THRESHOLD=524288 /bin/echo hi
"""),
    "fusion_off": (["-np", "1", "--fusion-threshold-mb", "0"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_FUSION_THRESHOLD=0
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_FUSION_THRESHOLD=0 /bin/echo hi
"""),
    "cycle_time": (["-np", "1", "--cycle-time-ms", "2.5"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_CYCLE_TIME_MS=2.5
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_CYCLE_TIME_MS=2.5 /bin/echo hi
"""),
    "stall_warning": (["-np", "1", "--stall-check-warning-time-seconds", "30"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_STALL_WARNING_S=30
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_STALL_WARNING_S=30 /bin/echo hi
"""),
    "stall_shutdown": (["-np", "1", "--stall-check-shutdown-time-seconds", "120"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_STALL_SHUTDOWN_S=120
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_STALL_SHUTDOWN_S=120 /bin/echo hi
"""),
    "peer_timeout": (["-np", "1", "--peer-timeout-seconds", "15"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_PEER_TIMEOUT_S=15
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_PEER_TIMEOUT_S=15 /bin/echo hi
"""),
    "log_level": (["-np", "1", "--log-level", "debug"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_LOG_LEVEL=debug
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x RANKTIME_LOG_LEVEL=debug /bin/echo hi
"""),
    "hosts": (["-np", "4", "-H", "node1:2,node2:2"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 4 -H node1:2,node2:2 --bind-to none --mca oob_tcp_keepalive_time 5 \
--mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 /bin/echo hi
"""),
    # One host named twice is one host: no keepalive settings.
    "hosts_one_host": (["-np", "4", "-H", "node1:2,node1:2"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 4 -H node1:2,node1:2 --bind-to none /bin/echo hi
"""),
    # A keepalive setting the user gives (here through --mpi-arg) is not given twice.
    "hostfile_two_hosts": (["-np", "4", "--hostfile", "{DIR}/two_hosts", "--mpi-arg=--mca",
                            "--mpi-arg=oob_tcp_keepalive_time", "--mpi-arg=9"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 4 --hostfile {DIR}/two_hosts --bind-to none --mca oob_tcp_keepalive_intvl 2 \
--mca oob_tcp_keepalive_probes 3 --mca oob_tcp_keepalive_time 9 /bin/echo hi
"""),
    "mca": (["-np", "4", "-H", "a:2,b:2", "--mca", "plm_rsh_agent", "/x/agent y",
             "--mca", "oob_tcp_keepalive_probes", "4"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 4 -H a:2,b:2 --bind-to none --mca oob_tcp_keepalive_time 5 \
--mca oob_tcp_keepalive_intvl 2 --mca plm_rsh_agent '/x/agent y' --mca oob_tcp_keepalive_probes 4 \
/bin/echo hi
"""),
    "single_host_oversubscribed": (["-np", "3", "-H", "localhost:2"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 3 -H localhost:2 --oversubscribe --bind-to none /bin/echo hi
"""),
    # More busy threads than cores (two per rank, on any machine these tests run on): ranks yield
    # while idle, unless the user says otherwise.
    "many_ranks_yield": (["-np", "256"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 256 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 /bin/echo hi
"""),
    "many_ranks_user_yield": (["-np", "256", "--mca", "mpi_yield_when_idle", "0"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 256 --oversubscribe --bind-to none --mca mpi_yield_when_idle 0 /bin/echo hi
"""),
    "hostfile": (["-np", "2", "--hostfile", "{DIR}/hosts"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 2 --hostfile {DIR}/hosts --bind-to none /bin/echo hi
"""),
    "oversubscribe_flag": (["-np", "1", "--oversubscribe"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 1 --oversubscribe --bind-to none /bin/echo hi
"""),
    "mpi_args": (["-np", "1", "--mpi-arg=--mca", "--mpi-arg=btl", "--mpi-arg=self,vader"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 1 --bind-to none --mca btl self,vader /bin/echo hi
"""),
    "np_spellings": (["-n", "1", "--verbose"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 1 --bind-to none /bin/echo hi
"""),
    # horovodrun's spellings: --hosts, -hostfile, --num-proc, the flags ranktime maps onto
    # its settings, and the two it hands to mpirun.
    "horovodrun": (["--num-proc", "2", "--hosts", "localhost:2", "--cache-capacity", "7",
                    "--no-stall-check", "--start-timeout", "30", "--log-level", "WARNING",
                    "--network-interface", "eth0", "--network-interface", "lo",
                    "--output-filename", "out"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
RANKTIME_CACHE_CAPACITY=7
RANKTIME_LOG_LEVEL=WARNING
RANKTIME_STALL_CHECK_DISABLE=1
RANKTIME_START_TIMEOUT_S=30
# command
{MPIRUN} {ROOT} -np 2 -H localhost:2 --bind-to none --mca btl_tcp_if_include eth0,lo \
--mca oob_tcp_if_include eth0,lo --output-filename {DIR}/out -x RANKTIME_CACHE_CAPACITY=7 \
-x RANKTIME_LOG_LEVEL=WARNING -x RANKTIME_STALL_CHECK_DISABLE=1 -x RANKTIME_START_TIMEOUT_S=30 \
/bin/echo hi
"""),
    "horovodrun_single_dash": (["-np", "2", "-hostfile", "{DIR}/hosts",
                                "--network-interfaces", "eth0,eth1"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
# command
{MPIRUN} {ROOT} -np 2 --hostfile {DIR}/hosts --bind-to none --mca btl_tcp_if_include eth0,eth1 \
--mca oob_tcp_if_include eth0,eth1 /bin/echo hi
"""),
    "everything": (["-np", "1", "--timeline-filename", "{DIR}/t.json", "--timeline-mark-cycles",
                    "--no-timeline-all-ranks", "--fusion-threshold-mb", "1",
                    "--cycle-time-ms", "1", "--stall-check-warning-time-seconds", "5",
                    "--stall-check-shutdown-time-seconds", "10", "--log-level", "trace"], """\
# environment added for mpirun
{ROOT_ENV}
# environment of every rank (-x)
TIMELINE_FILENAME={DIR}/t.json
TIMELINE_MARK_CYCLES=1
TIMELINE_ALL_RANKS=0
RANKTIME_FUSION_THRESHOLD=1048576
RANKTIME_CYCLE_TIME_MS=1
RANKTIME_STALL_WARNING_S=5
RANKTIME_STALL_SHUTDOWN_S=10
RANKTIME_LOG_LEVEL=trace
# command
{MPIRUN} {ROOT} -np 1 --bind-to none -x TIMELINE_FILENAME={DIR}/t.json -x TIMELINE_MARK_CYCLES=1 \
-x TIMELINE_ALL_RANKS=0 -x RANKTIME_FUSION_THRESHOLD=1048576 -x RANKTIME_CYCLE_TIME_MS=1 \
-x RANKTIME_STALL_WARNING_S=5 -x RANKTIME_STALL_SHUTDOWN_S=10 -x RANKTIME_LOG_LEVEL=trace /bin/echo hi
"""),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_dry_run_golden(cli, tmp_path, fake_mpirun, case):
    flags, expected = GOLDEN[case]
    (tmp_path / "hosts").write_text("localhost slots=2\n")
    (tmp_path / "two_hosts").write_text("# two hosts, one named twice\nn1 slots=2\nn2 slots=2 # x\nn1\n")
    (tmp_path / "sub").mkdir()
    flags = [f.replace("{DIR}", str(tmp_path)) for f in flags]
    result = ranktime("run", *flags, "--mpirun", fake_mpirun, "--dry-run", "--", "/bin/echo", "hi",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == golden(expected, fake_mpirun, tmp_path)
    assert not (fake_mpirun.parent / "ran").exists(), "--dry-run started mpirun"


def test_a_horovodrun_line_needs_no_separator(cli, fake_mpirun):
    """As horovodrun reads it: the program starts at the first argument that is neither a flag
    nor a flag's value, and everything after it is the program's, flags included."""
    result = ranktime("run", "-np", "1", "--mpirun", fake_mpirun, "--log-level", "info",
                      "--dry-run", "/bin/echo", "hi", "--bogus", "-np", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith(
        " -x RANKTIME_LOG_LEVEL=info /bin/echo hi --bogus -np 3")
    unknown = ranktime("run", "-np", "1", "--mpirun", fake_mpirun, "--bogus", "/bin/echo", "hi")
    assert unknown.returncode == 2
    assert "--bogus" in unknown.stderr and "ranktime run --help" in unknown.stderr


def test_dry_run_quotes_for_the_shell(cli, tmp_path, fake_mpirun):
    result = ranktime("run", "-np", "1", "--mpirun", fake_mpirun, "--dry-run", "--",
                      "/bin/echo", "a b", "it's", "$HOME", "", "x;y")
    assert result.returncode == 0, result.stderr
    command = result.stdout.splitlines()[-1]
    assert command.endswith(""" /bin/echo 'a b' 'it'\\''s' '$HOME' '' 'x;y'""")
    # Pasting it into a shell gives the same arguments back.
    echoed = subprocess.run(["/bin/sh", "-c", "printf '%s|' " + command.split("/bin/echo ", 1)[1]],
                            capture_output=True, text=True, check=True).stdout
    assert echoed == "a b|it's|$HOME||x;y|"


def test_oversubscribes_beyond_local_cores(cli, fake_mpirun):
    more = ranktime("run", "-np", NPROC + 1, "--mpirun", fake_mpirun, "--dry-run", "--", "/bin/true")
    assert "--oversubscribe" in more.stdout.splitlines()[-1]
    fits = ranktime("run", "-np", NPROC, "--mpirun", fake_mpirun, "--dry-run", "--", "/bin/true")
    assert "--oversubscribe" not in fits.stdout.splitlines()[-1]


def test_finds_mpirun_on_path(cli, tmp_path, fake_mpirun):
    env = dict(os.environ, PATH=f"{fake_mpirun.parent}:/usr/bin:/bin")
    result = ranktime("run", "-np", "1", "--dry-run", "--", "true", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(f"{fake_mpirun} ")


def not_writable_directory(tmp_path):
    """A directory this user cannot write to (root ignores permissions, not read-only mounts)."""
    if not ROOT_USER:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked
    for candidate in ["/sys", "/proc/sys", "/sys/fs"]:
        if os.path.isdir(candidate) and not os.access(candidate, os.W_OK):
            return Path(candidate)
    return None


BAD_INPUT = {
    "unknown_flag": (["-np", "2", "--bogus"], "--bogus"),
    "np_zero": (["-np", "0"], "-np must be at least 1 (got 0)"),
    "np_not_a_number": (["-np", "two"], "two"),
    "np_missing": ([], "--np is required"),
    "timeline_dir_missing": (["-np", "1", "--timeline-filename", "{DIR}/nope/t.json"],
                             "--timeline-filename {DIR}/nope/t.json: directory {DIR}/nope does not exist"),
    "timeline_parent_is_file": (["-np", "1", "--timeline-filename", "{DIR}/file/t.json"],
                                "{DIR}/file is not a directory"),
    "timeline_is_directory": (["-np", "1", "--timeline-filename", "{DIR}"],
                              "is a directory, not a file"),
    "missing_program_on_path": (["-np", "1", "--", "ranktime-no-such-program"],
                                "program ranktime-no-such-program not found on PATH"),
    "missing_program_path": (["-np", "1", "--", "./no-such-program"],
                             "program ./no-such-program does not exist or is not executable"),
    "no_program": (["-np", "1"], "no program to run"),
    "program_before_separator": (["-np", "1", "/bin/echo", "--", "x"], "comes before --"),
    "bad_mpirun": (["-np", "1", "--mpirun", "/no/such/mpirun", "--", "/bin/true"],
                   "--mpirun /no/such/mpirun: does not exist or is not executable"),
    "cycle_time_zero": (["-np", "1", "--cycle-time-ms", "0"],
                        "--cycle-time-ms 0: expected a positive number"),
    "fusion_negative": (["-np", "1", "--fusion-threshold-mb=-1"],
                        "--fusion-threshold-mb -1: expected a non-negative number"),
    "stall_not_a_number": (["-np", "1", "--stall-check-warning-time-seconds", "soon"],
                           "--stall-check-warning-time-seconds soon: expected a positive number"),
    "stall_warning_zero": (["-np", "1", "--stall-check-warning-time-seconds", "0"],
                           "--stall-check-warning-time-seconds 0: expected a positive number"),
    "stall_shutdown_negative": (["-np", "1", "--stall-check-shutdown-time-seconds=-3"],
                                "--stall-check-shutdown-time-seconds -3: expected a non-negative number"),
    "peer_timeout_negative": (["-np", "1", "--peer-timeout-seconds=-1"],
                              "--peer-timeout-seconds -1: expected a non-negative number"),
    "log_level": (["-np", "1", "--log-level", "loud"], "loud"),
    "hosts_and_hostfile": (["-np", "1", "-H", "a", "--hostfile", "{DIR}/file"], "excludes"),
    "hostfile_missing": (["-np", "1", "--hostfile", "{DIR}/nope"], "--hostfile {DIR}/nope: no such file"),
    "mca_swallows_a_flag": (["-np", "1", "--mca", "--dry-run", "x"],
                            "--mca --dry-run x: expected --mca NAME VALUE"),
    "mca_value_is_a_flag": (["-np", "1", "--mca", "btl", "--verbose"],
                            "--mca btl --verbose: expected --mca NAME VALUE"),
    "mca_missing_value": (["-np", "1", "--mca", "btl"], "--mca"),
    "start_timeout_negative": (["-np", "1", "--start-timeout=-1"],
                               "--start-timeout -1: expected a non-negative number"),
    "cache_capacity_not_a_number": (["-np", "1", "--cache-capacity", "lots"],
                                    "--cache-capacity lots: expected a non-negative number"),
    "network_interface_not_a_name": (["-np", "1", "--network-interface", "eth0;x"],
                                     "--network-interface 'eth0;x': not an interface name"),
    "horovodrun_flag_ranktime_lacks": (["-np", "1", "--gloo"], "--gloo"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_exits_2_before_starting(cli, tmp_path, fake_mpirun, case):
    flags, message = BAD_INPUT[case]
    (tmp_path / "file").write_text("x")
    flags = [f.replace("{DIR}", str(tmp_path)) for f in flags]
    if "--" not in flags and case not in ("no_program", "np_missing") and "--mpirun" not in flags:
        flags += ["--", "/bin/true"]
    if "--mpirun" not in flags:
        flags = ["--mpirun", str(fake_mpirun)] + flags
    result = ranktime("run", *flags, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message.replace("{DIR}", str(tmp_path)) in result.stderr
    assert not (fake_mpirun.parent / "ran").exists(), "mpirun started despite bad input"


def test_timeline_directory_not_writable(cli, tmp_path, fake_mpirun):
    directory = not_writable_directory(tmp_path)
    if directory is None:
        pytest.skip("no directory that this user cannot write to")
    result = ranktime("run", "-np", "1", "--mpirun", fake_mpirun, "--timeline-filename",
                      directory / "t.json", "--", "/bin/true")
    assert result.returncode == 2
    assert f"directory {directory} is not writable" in result.stderr


def test_no_mpirun_found(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = ranktime("run", "-np", "1", "--", "/bin/true", env=dict(os.environ, PATH=str(empty)))
    assert result.returncode == 2
    assert "mpirun not found on PATH: install Open MPI or pass --mpirun PATH" in result.stderr


def test_help_and_version(cli):
    assert ranktime("--help").returncode == 0
    assert "--timeline-filename" in ranktime("run", "--help").stdout
    assert ranktime("--version").returncode == 0
    assert ranktime().returncode == 2  # a subcommand is required


# --- with a real mpirun -----------------------------------------------------------------------

# One write per line: print() writes the text and the newline apart when stdout is unbuffered
# (PYTHONUNBUFFERED=1), and mpirun can then put the other rank's line between them.
ARGS_PROGRAM = """\
import json, os, sys
sys.stdout.write(json.dumps({"rank": int(os.environ["OMPI_COMM_WORLD_RANK"]), "argv": sys.argv[1:],
                             "env": {k: v for k, v in os.environ.items()
                                     if k.startswith(("TIMELINE_", "RANKTIME_"))}}) + "\\n")
"""


@pytest.mark.parametrize("np_", [1, 2])
def test_arguments_reach_every_rank_unchanged(cli, tmp_path, np_):
    program = tmp_path / "args.py"
    program.write_text(ARGS_PROGRAM)
    args = ["a b", "it's", '"quoted"', "$HOME", "", "*", "x;y", "tab\there", "new\nline",
            "\u00e9\u4e2d", "--steps", "3", "-np", "--"]
    result = ranktime("run", "-np", np_, "--timeline-filename", "t.json", "--log-level", "info",
                      "--", sys.executable, program, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert sorted(line["rank"] for line in lines) == list(range(np_))
    for line in lines:
        assert line["argv"] == args
        assert line["env"]["TIMELINE_FILENAME"] == str(tmp_path / "t.json")
        assert line["env"]["RANKTIME_LOG_LEVEL"] == "info"


def test_job_exit_status_comes_back(cli):
    assert ranktime("run", "-np", "1", "--", "/bin/sh", "-c", "exit 3").returncode == 3
    assert ranktime("run", "-np", "2", "--", "/bin/sh", "-c", "exit 0").returncode == 0


def test_signalled_mpirun_gives_128_plus_signal(cli, tmp_path):
    mpirun = tmp_path / "mpirun"
    mpirun.write_text("#!/bin/sh\nkill -TERM $$\n")
    mpirun.chmod(0o755)
    assert ranktime("run", "-np", "1", "--mpirun", mpirun, "--", "/bin/true").returncode == 143


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_forwards_signals_to_mpirun(cli, tmp_path, sig):
    """A signal sent to ranktime reaches mpirun, and mpirun's exit status comes back."""
    mpirun = tmp_path / "mpirun"
    marker = tmp_path / "got"
    mpirun.write_text(f"""#!/bin/sh
trap 'echo INT > {marker}; exit 41' INT
trap 'echo TERM > {marker}; exit 42' TERM
touch {tmp_path}/ready
while true; do sleep 0.05; done
""")
    mpirun.chmod(0o755)
    process = subprocess.Popen([CLI, "run", "-np", "1", "--mpirun", str(mpirun), "--", "/bin/true"])
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline, "fake mpirun did not start"
            time.sleep(0.02)
        process.send_signal(sig)
        rc = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    name = "INT" if sig == signal.SIGINT else "TERM"
    assert marker.read_text().strip() == name
    assert rc == (41 if sig == signal.SIGINT else 42)


def test_sigterm_stops_a_real_job(cli, tmp_path):
    process = subprocess.Popen([CLI, "run", "-np", "2", "--", "/bin/sleep", "120"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)  # let mpirun start its ranks (no assertion depends on this)
        process.send_signal(signal.SIGTERM)
        rc = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert rc != 0

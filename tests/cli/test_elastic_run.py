"""`ranktime run --host-discovery-script` (elastic jobs) with a stand-in mpirun that fails its
attempts as told: each flag's effect on the attempts, the blacklist, hosts that appear, the reset
limit, and bad values. tests/multihost/test_elastic.py runs the real thing on emulated hosts."""
from pathlib import Path

import pytest

from conftest import ranktime

# The stand-in mpirun: records each attempt's arguments in attempt.N, then acts as the file
# `plan` says for that attempt (one line each): `ok`, `lose HOST` (mpirun's words for a rank
# killed there, exit 137), `fail` (exit 1, no host named), or `grow HOST` (adds HOST to the
# discovered hosts, waits for ranktime's hosts_updated note, and exits as ranks do after it).
FAKE_MPIRUN = r"""#!/bin/sh
dir=$(dirname "$0")
n=$(ls "$dir" | grep -c '^attempt\.')
printf '%s\n' "$@" > "$dir/attempt.$n"
action=$(sed -n "$((n + 1))p" "$dir/plan")
elastic_dir=$(printf '%s\n' "$@" | sed -n 's/^RANKTIME_ELASTIC_DIR=//p')
case "$action" in
  ok) exit 0 ;;
  lose*) echo "mpirun noticed that process rank 1 with PID 4242 on node ${action#lose } exited on signal 9 (Killed)." >&2; exit 137 ;;
  grow*) echo "${action#grow }:1" >> "$dir/hosts"
         for i in $(seq 100); do [ -f "$elastic_dir/hosts_updated" ] && exit 75; sleep 0.1; done
         exit 9 ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def job(tmp_path):
    """A directory with the stand-in mpirun, a discovery script printing `hosts`, and helpers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("mpirun", FAKE_MPIRUN), ("discover.sh", f"#!/bin/sh\ncat {bin_dir}/hosts\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    class Job:
        dir = bin_dir
        script = bin_dir / "discover.sh"

        @staticmethod
        def run(hosts, plan, *flags):
            (bin_dir / "hosts").write_text("".join(f"{h}\n" for h in hosts))
            (bin_dir / "plan").write_text("".join(f"{a}\n" for a in plan))
            return ranktime("run", "--mpirun", bin_dir / "mpirun", "--host-discovery-script",
                            bin_dir / "discover.sh", *flags, "--", "/bin/echo", "hi",
                            cwd=tmp_path, timeout=60)

        @staticmethod
        def attempts():
            """Each attempt's -H and its elastic variables."""
            found = []
            for i in range(len(list(bin_dir.glob("attempt.*")))):
                args = (bin_dir / f"attempt.{i}").read_text().splitlines()
                env = dict(a.split("=", 1) for a in args if a.startswith(("RANKTIME_", "TIMELINE_")))
                found.append((args[args.index("-H") + 1], env))
            return found
    return Job


def test_a_lost_host_is_left_out_and_the_job_restarts_on_the_rest(job, tmp_path):
    p = job.run(["h0", "h1", "h2"], ["lose h2", "ok"], "-np", "3", "--min-np", "2",
                "--timeline-filename", tmp_path / "t.json")
    assert p.returncode == 0, p.stderr
    (hosts0, env0), (hosts1, env1) = job.attempts()
    assert (hosts0, hosts1) == ("h0:1,h1:1,h2:1", "h0:1,h1:1")
    assert env0["RANKTIME_ELASTIC_ATTEMPT"] == "0" and env1["RANKTIME_ELASTIC_ATTEMPT"] == "1"
    assert "RANKTIME_ELASTIC_RESTART_REASON" not in env0
    assert env1["RANKTIME_ELASTIC_RESTART_REASON"].startswith(
        "lost host h2: mpirun noticed that process rank 1 with PID 4242 on node h2"), env1
    # One commit directory for every attempt; each attempt its own trace.
    assert env0["RANKTIME_ELASTIC_DIR"] == env1["RANKTIME_ELASTIC_DIR"]
    assert env0["TIMELINE_FILENAME"] == str(tmp_path / "t.json")
    assert env1["TIMELINE_FILENAME"] == str(tmp_path / "t.attempt1.json")
    assert "attempt 0 ended (exit status 137): lost host h2" in p.stderr
    assert "blacklisted: h2; restarting" in p.stderr
    assert not Path(env0["RANKTIME_ELASTIC_DIR"]).exists()  # removed at the end


def test_reset_limit_gives_up_with_a_clear_message(job):
    p = job.run(["h0", "h1", "h2"], ["lose h2", "lose h1", "ok"], "-np", "3", "--min-np", "1",
                "--reset-limit", "1")
    assert p.returncode == 137, p.stderr
    assert len(job.attempts()) == 2
    assert "ranktime run: error: giving up after 1 reset (--reset-limit 1): attempt 1 ended: " \
           "lost host h1" in p.stderr, p.stderr


def test_min_np_too_few_hosts_left_ends_the_job(job):
    p = job.run(["h0", "h1", "h2"], ["lose h2", "ok"], "-np", "3", "--min-np", "3",
                "--elastic-timeout", "0")
    assert p.returncode == 1, p.stderr
    assert len(job.attempts()) == 1
    assert "found 2 usable slots, fewer than --min-np 3, for --elastic-timeout 0 s " \
           "(blacklisted: h2): giving up" in p.stderr, p.stderr


def test_elastic_timeout_waits_for_hosts_to_appear(job):
    # One host short at first; the script finds the third within the timeout.
    (job.dir / "late.sh").write_text(
        f"#!/bin/sh\nn=$(cat {job.dir}/n 2>/dev/null || echo 0); echo $((n + 1)) > {job.dir}/n\n"
        f"cat {job.dir}/hosts\n[ $n -ge 2 ] && echo h2\nexit 0\n")
    (job.dir / "late.sh").chmod(0o755)
    (job.dir / "hosts").write_text("h0\nh1\n")
    (job.dir / "plan").write_text("ok\n")
    p = ranktime("run", "--mpirun", job.dir / "mpirun", "--host-discovery-script",
                 job.dir / "late.sh", "-np", "3", "--elastic-timeout", "30", "--", "/bin/echo")
    assert p.returncode == 0, p.stderr
    assert job.attempts()[0][0] == "h0:1,h1:1,h2:1"


def test_max_np_and_slots_per_host_size_the_attempt(job):
    p = job.run(["h0", "h1:3", "h2"], ["ok"], "-np", "2", "--max-np", "5", "--slots-per-host", "2")
    assert p.returncode == 0, p.stderr
    assert job.attempts()[0][0] == "h0:2,h1:3"
    assert "\n-np\n5\n" in (job.dir / "attempt.0").read_text()


def test_blacklist_cooldown_lets_a_failed_host_back(job):
    p = job.run(["h0", "h1", "h2"], ["lose h2", "ok"], "-np", "3", "--min-np", "2",
                "--blacklist-cooldown-range", "0", "0")
    assert p.returncode == 0, p.stderr
    assert [h for h, _ in job.attempts()] == ["h0:1,h1:1,h2:1", "h0:1,h1:1,h2:1"]


def test_a_host_that_appears_joins_at_the_next_restart(job):
    p = job.run(["h0", "h1"], ["grow h2", "ok"], "-np", "2", "--max-np", "3")
    assert p.returncode == 0, p.stderr
    (hosts0, _), (hosts1, env1) = job.attempts()
    assert (hosts0, hosts1) == ("h0:1,h1:1", "h0:1,h1:1,h2:1")
    assert env1["RANKTIME_ELASTIC_RESTART_REASON"] == "hosts appeared"
    assert "hosts appeared (h2): the job restarts on them after its next commit" in p.stderr


def test_dry_run_prints_the_first_attempt(job):
    p = job.run(["h0:2", "h1:2"], ["fail"], "-np", "4", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "-np 4 -H h0:2,h1:2" in p.stdout and "RANKTIME_ELASTIC_ATTEMPT=0" in p.stdout
    assert not job.attempts()


@pytest.mark.parametrize("flags, message", [
    (["--min-np", "0"], "--min-np 0: must be at least 1"),
    (["--max-np", "-3"], "--max-np -3: must be at least 1"),
    (["--min-np", "3", "--max-np", "2"], "--max-np 2: below --min-np 3"),
    (["--reset-limit", "-2"], "--reset-limit -2: must be 0 or more"),
    (["--blacklist-cooldown-range", "5", "1"],
     "--blacklist-cooldown-range 5.000000 1.000000: expected 0 <= MIN <= MAX seconds"),
    (["--elastic-timeout", "-1"], "--elastic-timeout -1.000000: must be 0 or more"),
    (["--slots-per-host", "0"], "--slots-per-host 0: must be at least 1"),
    (["-H", "h0:1"], "takes the hosts from the script: drop -H/--hostfile"),
])
def test_bad_values_are_errors_naming_the_flag(job, flags, message):
    p = job.run(["h0"], ["ok"], "-np", "1", *flags)
    assert p.returncode == 2, p.stderr
    assert "ranktime run: error: " in p.stderr and message in p.stderr, p.stderr
    assert not job.attempts()


def test_min_np_needs_a_discovery_script(tmp_path):
    p = ranktime("run", "-np", "2", "--min-np", "1", "--", "/bin/echo")
    assert p.returncode == 2 and "--min-np needs --host-discovery-script" in p.stderr, p.stderr
    p = ranktime("run", "-np", "2", "--host-discovery-script", tmp_path / "none", "--", "/bin/echo")
    assert p.returncode == 2, p.stderr
    assert f"--host-discovery-script {tmp_path / 'none'}: not an executable file" in p.stderr


@pytest.mark.parametrize("output, status, message", [
    ("h0:1\n<b>x</b>:2\n", 0, "printed line 2 '<b>x</b>:2': not a host name"),
    ("h0:zero\n", 0, "printed line 1 'h0:zero': expected HOST or HOST:SLOTS with SLOTS >= 1"),
    ("h0\n", 3, "exited with status 3"),
])
def test_a_bad_discovery_script_is_an_error_naming_it(job, output, status, message):
    (job.dir / "bad.sh").write_text(f"#!/bin/sh\nprintf '{output}'\nexit {status}\n")
    (job.dir / "bad.sh").chmod(0o755)
    (job.dir / "plan").write_text("ok\n")
    p = ranktime("run", "--mpirun", job.dir / "mpirun", "--host-discovery-script",
                 job.dir / "bad.sh", "-np", "1", "--", "/bin/echo")
    assert p.returncode == 2, p.stderr
    assert f"--host-discovery-script {job.dir / 'bad.sh'}" in p.stderr and message in p.stderr, \
        p.stderr
    assert not job.attempts()

"""`ranktime summary` and `report` of an elastic job's traces (t.json, t.attempt1.json), written
here with known figures: the attempts on one time axis (the lost host, when, what the restart
took, the steps redone since the last commit) in the summary's lines and JSON, and in the page's
attempts section, loaded in headless Chromium, where a hostile host name and restart reason stay
text. tests/multihost/test_elastic.py checks the same on a real job's traces."""
import json

from conftest import ranktime
from test_report import HOSTILE_HOST, HOSTILE_TENSORS, READY, browser, page_parts  # noqa: F401

REGIONS_PID = 1000000000  # trace_names.h: rank R's regions on pid base + R, tid 1
EPOCH_US = 1_700_000_000_000_000
STEP_US, STARTUP_US = 100_000, 500_000
REASON = "lost host " + HOSTILE_HOST + ": " + HOSTILE_TENSORS[0]


def attempt_trace(path, attempt, start_s, hosts, reason, steps, commits, end_us=None):
    """One attempt: `steps` steps of every rank after STARTUP_US, an allreduce each, and a 10 ms
    elastic.commit region 50 ms into each of the first `commits` steps on every rank; the last
    event at end_us (a SIGTERM instant) when given."""
    config = {"RANKTIME_ELASTIC_ATTEMPT": str(attempt), "RANKTIME_ELASTIC_RESTART_REASON": reason}
    events = [{"name": "ranktime_run", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": 0,
               "args": {"ranks": len(hosts), "hostnames": hosts, "config": config,
                        "start_time_since_epoch_in_micros": EPOCH_US + start_s * 1e6}},
              {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad"}}]
    for r in range(len(hosts)):
        events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r + 1,
                    "args": {"name": "steps rank %d" % r}},
                   {"name": "thread_name", "ph": "M", "pid": REGIONS_PID + r, "tid": 1,
                    "args": {"name": "regions"}}]
    for k in range(steps):
        t0 = STARTUP_US + k * STEP_US
        for r in range(len(hosts)):
            events.append({"name": "STEP", "ph": "X", "pid": 0, "tid": r + 1, "ts": t0,
                           "dur": STEP_US, "args": {"step": k}})
            if k < commits:
                events.append({"name": "elastic.commit", "ph": "X", "pid": REGIONS_PID + r,
                               "tid": 1, "ts": t0 + 50_000, "dur": 10_000})
        events.append({"name": "NEGOTIATE_ALLREDUCE", "ph": "X", "pid": 1, "tid": 0,
                       "ts": t0 + 80_000, "dur": 1000})
        events += [{"name": str(r), "ph": "X", "pid": 1, "tid": 0, "ts": t0 + 80_000 + 500 * r,
                    "dur": 0} for r in range(len(hosts))]
    if end_us is not None:
        events.append({"name": "SIGTERM", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": end_us,
                       "args": {"message": "received SIGTERM"}})
    path.write_text(json.dumps(events))
    return path


def elastic_set(tmp_path):
    """Attempt 0 on h0, a hostile host and h2: 6 steps, commits in the first 3 (the last ends at
    0.76 s, inside step 2), SIGTERM at 1.30 s. Attempt 1 starts 2 s after it on h0 and h2, first
    step at 2.50 s: the restart took 1.20 s, and steps 2 to 5 (4 steps, 0.54 s) were redone."""
    attempt_trace(tmp_path / "t.json", 0, 0, ["h0", HOSTILE_HOST, "h2"], "", 6, 3,
                  end_us=1_300_000)
    attempt_trace(tmp_path / "t.attempt1.json", 1, 2, ["h0", "h2"], REASON, 8, 8)
    return str(tmp_path / "t*.json")


RESTART_LINE = ("restart 1 (attempt 0 -> 1): lost host " + HOSTILE_HOST + " at 1.30 s; restart "
                "took 1.20 s (attempt 0's last event to attempt 1's first step); 4 steps and "
                "0.54 s since the last commit redone; reason: " + REASON)


def test_summary_puts_the_attempts_on_one_time_axis(cli, tmp_path):
    traces = elastic_set(tmp_path)
    p = ranktime("summary", traces)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["attempts: 2 (the figures below are attempt 1's)", RESTART_LINE], lines
    out = json.loads(ranktime("summary", traces, "--format", "json").stdout)
    first, second = out["attempts"]
    assert (first["last_commit_s"], first["steps_after_commit"]) == (0.76, 4), first
    assert (second["start_s"], second["first_step_s"]) == (2.0, 2.5), second
    assert out["files"] == [str(tmp_path / "t.attempt1.json")]


def test_report_shows_the_attempts_before_the_last_ones_figures(cli, tmp_path, browser):
    report = tmp_path / "elastic.html"
    p = ranktime("report", elastic_set(tmp_path), "-o", report)
    assert p.returncode == 0, p.stderr
    assert "8 steps, 2 ranks" in p.stdout  # the last attempt's
    _, _, data = page_parts(report.read_text())
    assert "<" not in data and ">" not in data
    attempts = json.loads(data)["attempts"]
    assert attempts["lines"] == [RESTART_LINE]
    table = attempts["table"]
    col = {c["name"]: i for i, c in enumerate(table["columns"])}
    first, second = table["rows"]
    assert [first[col[c]] for c in ("attempt", "start_s", "end_s", "lost_hosts", "last_commit_s",
                                    "steps_redone", "redone_s", "restart_s")] == \
        [0, 0, 1.3, HOSTILE_HOST, 0.76, 4, 0.54, 1.2], first
    assert [second[col[c]] for c in ("attempt", "start_s", "hosts", "reason", "steps_redone")] == \
        [1, 2, "h0, h2", REASON, None], second

    browser.console.clear()
    browser.open(report.as_uri(), READY)
    assert browser.console == []
    # The attempts' section comes before the per-run figures, which are attempt 1's.
    assert browser.evaluate("Boolean(document.getElementById('attempts').compareDocumentPosition("
                            "document.getElementById('cost')) & Node.DOCUMENT_POSITION_FOLLOWING)")
    assert browser.evaluate("document.getElementById('restart-lines').textContent") == RESTART_LINE
    # A bar per attempt, attempt 0's work since its last commit, and one restart.
    count = "document.querySelectorAll('#attempts-chart rect.%s').length"
    assert [browser.evaluate(count % c) for c in ("attempt:not(.starting):not(.redone)",
                                                  "redone", "restart")] == [2, 1, 1]
    assert browser.evaluate("document.querySelectorAll('#table-attempts tbody tr').length") == 2
    tip = browser.evaluate("""(() => {
        const bar = document.querySelector('#attempts-chart rect.redone');
        const box = bar.getBoundingClientRect();
        bar.dispatchEvent(new MouseEvent('mousemove', {bubbles: true,
            clientX: box.x + 1, clientY: box.y + 1}));
        return document.getElementById('tooltip').textContent; })()""")
    assert tip == ("attempt 0: 0.00 s to 1.30 s\nhosts: h0, " + HOSTILE_HOST + ", h2\nlost: " +
                   HOSTILE_HOST + "\nredone: 4 steps, 0.54 s since the last commit"), tip
    # The hostile host and reason are text: nothing they carry ran or became an element.
    assert browser.evaluate("document.body.dataset.pwned === undefined")
    assert browser.evaluate("document.title") == "ranktime report: t.attempt1.json"
    assert browser.evaluate(
        "document.querySelectorAll('iframe, img, script:not([id])').length") == 1
    text = browser.evaluate("document.body.innerText")
    assert HOSTILE_HOST in text and REASON in text

"""`ranktime report`: the page is self-contained and safe (checked in its text), and headless
Chromium loads it from file:// with no console errors, shows the slow rank and a ranks x steps
heat map, and runs no script that hostile tensor names or hostnames try to smuggle in.
Screenshots are written to report_artefacts/ in the test's working directory."""
import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from conftest import generate, ranktime
from headless_chromium import CHROMIUM, Page

ARTEFACTS = Path("report_artefacts")
READY = "document.body.getAttribute('data-ready') === '1'"

# Names that would run script if they became markup, and what each script would change.
HOSTILE_TENSORS = [
    '</script><script>document.body.dataset.pwned="script"</script>',
    '"><svg onload="document.body.dataset.pwned=\'svg\'">',
    "<img src=x onerror=\"document.body.dataset.pwned='img'\">",
    "javascript:document.body.dataset.pwned='href'",
]
HOSTILE_HOST = "'\"><iframe srcdoc=\"<script>parent.document.title='pwned'</script>\">"


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("chromium not found: scripts/setup.sh installs Debian's chromium")
    ARTEFACTS.mkdir(exist_ok=True)
    with Page(width=1400, height=1000) as page:
        yield page


def make_report(tmp_path, name="t", **trace):
    trace_path = generate(tmp_path / f"{name}.json", **trace)
    out = tmp_path / f"{name}.html"
    result = ranktime("report", trace_path, "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{out}: ")
    return out


def page_parts(html):
    script = html[html.rindex("<script>") + len("<script>"):html.rindex("</script>")]
    style = html[html.index("<style>") + len("<style>"):html.index("</style>")]
    data = html[html.index('id="report-data">') + len('id="report-data">'):]
    data = data[:data.index("</script>")]
    return script, style, data


def csp_hash(text):
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


SLOW = dict(ranks=4, tensors=5, steps=12, slow_rank=2, delay_us=15000, slow_steps="3,4,5,9",
            step_marks=True, start_lag_us=40, fused=5)


def test_page_is_self_contained_and_locked_down(cli, tmp_path):
    html = make_report(tmp_path, **SLOW).read_text()
    script, style, data = page_parts(html)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    # No network, and no script or style but the page's own (by their digests).
    assert csp.startswith("default-src 'none'; ")
    assert f"script-src '{csp_hash(script)}'" in csp
    assert f"style-src '{csp_hash(style)}'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    # Nothing to fetch: no src or href but the empty data: icon.
    assert re.findall(r'(?:src|href)="([^"]*)"', html) == ["data:,"]
    assert html.count("<script") == 2
    # The data is JSON that cannot end its element.
    assert "<" not in data and ">" not in data
    parsed = json.loads(data)
    assert parsed["slowest_rank"] == 2
    assert parsed["run"]["steps"] == 12 and parsed["run"]["steps_from"] == "step marks"
    assert len(parsed["heat"]["columns"]) == 12


def test_chromium_shows_the_slow_rank_and_the_heat_map(cli, tmp_path, browser):
    report = make_report(tmp_path, **SLOW)
    browser.console.clear()
    browser.open(report.as_uri(), READY)
    assert browser.console == []
    assert browser.evaluate("document.getElementById('slowest-rank').textContent") == \
        "Slowest rank: rank 2 (n1)."
    assert browser.evaluate("document.getElementById('summary-line').textContent").startswith(
        "slowest rank: 2 (n1), last to be ready in 20 of 60 negotiations")
    # One cell per rank and step; the slow rank's late steps are the only coloured ones.
    cells = browser.evaluate("""Array.from(document.querySelectorAll('#heatmap-cells rect.cell'))
        .map(c => [Number(c.dataset.r), Number(c.dataset.c), c.getAttribute('fill')])""")
    assert len(cells) == 4 * 12
    white = "rgb(247,247,247)"
    hot = {(r, c) for r, c, fill in cells if fill != white}
    assert hot == {(2, 3), (2, 4), (2, 5), (2, 9)}
    # Hovering a cell tells its figures.
    tip = browser.evaluate("""(() => {
        const cell = document.querySelector('#heatmap-cells rect[data-r="2"][data-c="4"]');
        const box = cell.getBoundingClientRect();
        cell.dispatchEvent(new MouseEvent('mousemove', {bubbles: true,
            clientX: box.x + 1, clientY: box.y + 1}));
        return document.getElementById('tooltip').textContent; })()""")
    assert tip.startswith("rank 2 (n1), step 4\nlast tensor ready 15.000 ms after the first rank")
    assert "step start 80.0 \u00b5s after the first rank" in tip
    # The cost first: rank 2 was 15 ms late in 4 steps; one bar and one replayed tick per step,
    # with the costly steps' bars topped by what rank 2 cost.
    assert browser.evaluate("document.getElementById('cost-line').textContent").startswith(
        "cost: rank 2 (n1) made the job 60.000 ms longer (")
    assert browser.evaluate("document.querySelectorAll('#cost-chart rect.replayed').length") == 12
    assert browser.evaluate(
        "document.querySelectorAll('#cost-chart rect[fill=\"#f1a340\"]').length") == 4
    assert browser.evaluate("Boolean(document.getElementById('cost').compareDocumentPosition("
                            "document.getElementById('verdict')) & Node.DOCUMENT_POSITION_FOLLOWING)")
    assert browser.evaluate("document.querySelectorAll('#table-phases tbody tr').length") >= 2
    assert browser.evaluate("document.querySelectorAll('#table-top_wait tbody tr').length") == 5
    browser.screenshot(ARTEFACTS / "report.png")
    assert (ARTEFACTS / "report.png").stat().st_size > 10_000


def test_hostile_names_run_no_script(cli, tmp_path, browser):
    report = make_report(tmp_path, "hostile", ranks=3, tensors=5, steps=4, slow_rank=1,
                         delay_us=2000, tensor_name=HOSTILE_TENSORS, hostname=HOSTILE_HOST)
    assert ranktime("check", tmp_path / "hostile.json").returncode == 0

    browser.console.clear()
    browser.open(report.as_uri(), READY)
    # A blocked inline script or a failed load would be a console error; there is none.
    assert browser.console == []
    # What the scripts would have changed is unchanged...
    assert browser.evaluate("document.body.dataset.pwned === undefined")
    assert browser.evaluate("document.title") == "ranktime report: hostile.json"
    assert browser.evaluate("document.querySelectorAll('iframe, img, script:not([id])').length") == 1
    assert browser.evaluate(
        "Array.from(document.querySelectorAll('*')).filter(e => Array.from(e.attributes)"
        ".some(a => a.name.startsWith('on'))).length") == 0
    # ...and the names are shown as the text they are.
    text = browser.evaluate("document.body.innerText")
    for name in HOSTILE_TENSORS:
        assert name in text
    assert HOSTILE_HOST in text
    browser.screenshot(ARTEFACTS / "report_hostile.png")


def test_many_steps_are_grouped(cli, tmp_path, browser):
    report = make_report(tmp_path, "long", ranks=2, tensors=1, steps=2500, slow_rank=1,
                         delay_us=100, slow_steps="2400")
    browser.console.clear()
    browser.open(report.as_uri(), READY)
    assert browser.console == []
    heat = json.loads(page_parts(report.read_text())[2])["heat"]
    assert heat["group"] == 3
    assert len(heat["columns"]) == 834
    assert heat["columns"][800] == {"label": "2400\u20132402", "first": 2400, "last": 2402}
    assert browser.evaluate("document.querySelectorAll('#heatmap-cells rect').length") == 2 * 834


def test_64_ranks_by_1000_steps(cli, tmp_path, browser):
    """Aggregates, not events: a 43 MB trace makes a page of about a megabyte."""
    report = make_report(tmp_path, "wide", ranks=64, tensors=1, steps=1000, slow_rank=17,
                         delay_us=2000, slow_steps="100,200,300", step_marks=True)
    assert report.stat().st_size < 2_000_000
    browser.console.clear()
    browser.open(report.as_uri(), READY)
    assert browser.console == []
    assert browser.evaluate("document.querySelectorAll('#heatmap-cells rect').length") == 64_000
    assert browser.evaluate("document.getElementById('slowest-rank').textContent") == \
        "Slowest rank: rank 17 (n1)."


def test_report_options(cli, tmp_path):
    trace = generate(tmp_path / "t.json", ranks=2, steps=2)
    missing_dir = tmp_path / "no" / "r.html"
    result = ranktime("report", trace, "-o", missing_dir)
    assert result.returncode == 2
    assert f"cannot write {missing_dir}" in result.stderr
    result = ranktime("report", trace)
    assert result.returncode == 2
    assert "--output is required" in result.stderr
    result = ranktime("report", trace, "-o", tmp_path / "r.html", "-k", "0")
    assert result.returncode == 2
    assert "expected a number of tensors, 1 or more, not 0" in result.stderr
    result = ranktime("report", tmp_path / "nope.json", "-o", tmp_path / "r.html")
    assert result.returncode == 2
    assert "No such file" in result.stderr

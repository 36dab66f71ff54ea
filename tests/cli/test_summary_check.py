"""`ranktime summary` and `ranktime check` on generated traces whose contents are known: output
formats parse, the numbers are right, broken files fail with the right message, repair works."""
import json

import pytest

from conftest import csv_tables, generate, lateness_by_rank, ranktime, summary_json

SLOW = dict(ranks=4, tensors=6, steps=10, slow_rank=2, delay_us=20000, fused=3,
            bytes=1 << 20, collective_us=500, mark_cycles=True)


@pytest.fixture
def slow_trace(tmp_path):
    return generate(tmp_path / "slow.json", **SLOW)


def events_of(path):
    """The trace's events, one JSON line each (the writer's layout)."""
    return [line.rstrip(",") for line in path.read_text().splitlines() if line not in ("[", "]", "")]


def write_events(path, events):
    path.write_text("[\n" + ",\n".join(events) + "\n]\n")
    return path


def test_text_summary_leads_with_the_cost_then_names_the_slow_rank(cli, slow_trace):
    result = ranktime("summary", slow_trace)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # Rank 2 is 20 ms late for every tensor of each of the 10 steps, and nothing hides it: on
    # time, every step would end 20 ms sooner.
    assert lines[0].startswith("cost: rank 2 (n1) made the job 200.000 ms longer (")
    assert "; without it, steps would take " in lines[0]
    assert lines[1].startswith("replay: 10 steps (no step marks read: step n is each tensor's "
                               "n-th negotiation) replayed within 0.0% of their measured time")
    assert lines[1].endswith("with nobody late they would take 200.000 ms less")
    assert lines[2].startswith(f"{slow_trace}: 4 ranks (n1 x4)")
    # Wall-clock waits: per step, each of the 3 other ranks waits from its first tensor's readiness
    # to the slow rank's last (tensors are 10 us apart): 3 x (20 ms + 50 us) x 10 steps.
    assert lines[3] == ("slowest rank: 2 (n1), last to be ready in 60 of 60 negotiations "
                        "(100.0%), mean lag 20.000 ms; the other ranks waited 601.500 ms for it")
    assert lines[4].startswith("waiting: the ranks spent 601.500 ms of their 4 x ")
    assert lines[4].endswith("waiting for another rank's tensor; 100.0% of it for rank 2 (n1)")
    for title in ["lateness per rank", "where the time went", "top 10 tensors by negotiation wait",
                  "top 10 tensors by processing time", "fusion", "cycles", "bandwidth"]:
        assert any(line.startswith(title) for line in lines), title


def test_csv_parses_and_matches(cli, slow_trace):
    result = ranktime("summary", slow_trace, "--format", "csv")
    assert result.returncode == 0, result.stderr
    tables = csv_tables(result.stdout)
    assert set(tables) >= {"run", "lateness", "time", "top_wait", "top_processing", "fusion",
                           "cycles", "bandwidth", "cost", "cost_steps", "cost_step_ranks"}
    cost = {int(row["rank"]): row for row in tables["cost"]}
    assert float(cost[2]["saving_ms"]) == pytest.approx(200.0)
    assert float(cost[2]["saving_per_step_ms"]) == pytest.approx(20.0)
    assert len(tables["cost_steps"]) == 10
    assert tables["run"][0]["slowest_rank"] == "2"
    lateness = {int(row["rank"]): row for row in tables["lateness"]}
    assert float(lateness[2]["mean_lag_ms"]) == pytest.approx(20.0)
    assert float(lateness[0]["mean_lag_ms"]) == 0
    phases = {(row["op"], row["phase"]): row for row in tables["time"]}
    assert int(phases[("ALLREDUCE", "MPI_ALLREDUCE")]["count"]) == 4 * 2 * 10  # batches x lanes
    fusion = tables["fusion"][0]
    assert float(fusion["tensors_per_batch"]) == 3
    assert float(fusion["bytes_per_batch"]) == 3 * (1 << 20)
    bandwidth = tables["bandwidth"][0]
    assert int(bandwidth["ranks"]) == 4 and float(bandwidth["batches_per_rank"]) == 2 * 10
    algbw = 3 * (1 << 20) / 500e-6 / 1e9
    assert float(bandwidth["algbw_gbps"]) == pytest.approx(algbw, rel=1e-5)
    assert float(bandwidth["busbw_gbps"]) == pytest.approx(algbw * 1.5, rel=1e-5)
    assert int(tables["cycles"][0]["cycles"]) == 20


def test_json_parses_and_matches(cli, slow_trace):
    summary = summary_json(slow_trace)
    assert summary["slowest_rank"] == 2
    assert summary["reader"]["complete"] is True
    rows = lateness_by_rank(summary)
    assert rows[2]["mean_lag_ms"] == pytest.approx(20.0)
    assert rows[2]["times_last"] == 60
    assert rows[2]["others_waited_ms"] == pytest.approx(3 * 20.05 * 10)
    assert rows[0]["waited_ms"] == pytest.approx(20.05 * 10)
    assert len(summary["tables"]["top_wait"]) == 6
    run = summary["tables"]["run"][0]
    # Booleans are JSON booleans, not strings.
    assert run["closed_cleanly"] is True
    assert run["truncated"] is False
    wall = run["wall_ms"]
    assert run["waited_ms"] == pytest.approx(601.5)
    assert run["waited_pct"] == pytest.approx(100 * 601.5 / (4 * wall), abs=0.05)
    # What-if: 20 ms per step, for rank 2 only; the per-step rows add up to it.
    w = summary["what_if"]
    assert w["steps"] == 10 and w["steps_from"] == "negotiation order"
    assert w["wall_ms"] == pytest.approx(wall)
    assert w["replay_error_pct"] == pytest.approx(0, abs=1e-6)
    savings = {row["rank"]: row for row in w["ranks"]}
    assert sorted(savings) == [0, 1, 2, 3]
    assert savings[2]["saving_ms"] == pytest.approx(200.0)
    assert savings[2]["saving_pct"] == pytest.approx(100 * 200.0 / wall)
    assert all(savings[r]["saving_ms"] == 0 for r in (0, 1, 3))
    assert w["costliest_rank"] == 2
    assert w["nobody_late_saving_ms"] == pytest.approx(200.0)
    per_step = summary["tables"]["cost_step_ranks"]
    assert sum(row["saving_ms"] for row in per_step) == pytest.approx(savings[2]["saving_ms"])
    steps = summary["tables"]["cost_steps"]
    assert [row["costliest_rank"] for row in steps] == [2] * 10
    assert sum(row["measured_ms"] for row in steps) == pytest.approx(w["measured_step_ms"] * 10)
    assert summary["cost_line"].startswith("cost: rank 2 (n1) made the job 200.000 ms longer")
    # Shares are unions over wall time: never above 100%.
    for row in summary["tables"]["time"]:
        assert 0 <= row["share_pct"] <= 100, row
        assert row["busy_ms"] <= wall + 1e-6, row


def test_single_table_json_keeps_the_top_level_keys(cli, slow_trace):
    summary = summary_json(slow_trace, "--table", "lateness")
    assert summary["slowest_rank"] == 2
    assert summary["summary_line"].startswith("slowest rank: 2 ")
    assert summary["waiting_line"].startswith("waiting: ")
    assert list(summary["tables"]) == ["lateness"]


def test_single_table_csv_has_no_table_column(cli, slow_trace):
    result = ranktime("summary", slow_trace, "--format", "csv", "--table", "lateness")
    assert result.returncode == 0
    header = result.stdout.splitlines()[0]
    assert header.startswith("rank,host,negotiations,times_last")
    assert len(result.stdout.strip().splitlines()) == 5


def test_top_k(cli, slow_trace):
    summary = summary_json(slow_trace, "-k", "2")
    assert len(summary["tables"]["top_wait"]) == 2
    assert len(summary["tables"]["top_processing"]) == 2


def test_rank_and_time_filters(cli, slow_trace):
    without = summary_json(slow_trace, "--ranks", "0,1,3")
    assert without["slowest_rank"] is None
    assert sorted(lateness_by_rank(without)) == [0, 1, 3]
    pair = summary_json(slow_trace, "--ranks", "1-2")
    assert pair["slowest_rank"] == 2
    # Steps are 100 ms apart from 1 ms: a window over steps 3 and 4.
    window = summary_json(slow_trace, "--from", "301ms", "--to", "0.5s")
    assert window["tables"]["run"][0]["negotiations"] == 2 * 6


def test_op_filter(cli, slow_trace):
    assert summary_json(slow_trace, "--op", "allreduce")["slowest_rank"] == 2
    none = summary_json(slow_trace, "--op", "broadcast")
    assert none["tables"]["run"][0]["negotiations"] == 0


@pytest.mark.parametrize("args, message", [
    (["--ranks", "x"], "--ranks x: expected a list like 0,2-3"),
    (["--from", "3 days"], "--from 3 days: expected a time like 1500, 1.5ms or 2s"),
    (["--from", "2s", "--to", "1s"], "--to 1s is before --from 2s"),
    (["--format", "xml"], "xml"),
    (["-k", "0"], "--top: expected a number of tensors, 1 or more, not 0"),
    (["-k", "-3"], "--top: expected a number of tensors, 1 or more, not -3"),
])
def test_summary_bad_options(cli, slow_trace, args, message):
    result = ranktime("summary", slow_trace, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "1.797" not in result.stderr


def test_missing_file(cli, tmp_path):
    for command in ["summary", "check"]:
        result = ranktime(command, tmp_path / "nope.json")
        assert result.returncode == 2
        assert "No such file" in result.stderr


def test_truncated_file_still_summarises(cli, slow_trace):
    data = slow_trace.read_bytes()
    slow_trace.write_bytes(data[: len(data) * 3 // 5])
    result = ranktime("summary", slow_trace)
    assert result.returncode == 0, result.stderr
    assert f"truncated at byte {len(data) * 3 // 5}" in result.stderr
    assert "slowest rank: 2" in result.stdout
    summary = summary_json(slow_trace)
    assert summary["reader"]["truncated"] is True
    assert lateness_by_rank(summary)[2]["mean_lag_ms"] == pytest.approx(20.0)


def test_regions_are_left_alone_and_their_drops_are_one_line(cli, slow_trace, tmp_path):
    """Rank processes (pid 1e9 + r) with their regions: summary's figures are unchanged, check
    passes, and regions_dropped in the closing metadata is a note line."""
    before = summary_json(slow_trace)
    events = events_of(slow_trace)
    regions = [
        '{"name":"process_name","ph":"M","pid":1000000002,"tid":0,"args":{"name":"rank 2"}}',
        '{"name":"thread_name","ph":"M","pid":1000000002,"tid":1,"args":{"name":"regions"}}',
        '{"name":"data","ph":"X","pid":1000000002,"tid":1,"ts":10.0,"dur":20000.0}',
        '{"name":"<\\/script>","ph":"X","pid":1000000002,"tid":1,"ts":10.0,"dur":5.0,'
        '"args":{"blocked_us":1.5}}',
    ]
    end = events[-1].replace('"events_dropped":', '"regions_dropped":7,"events_dropped":')
    path = write_events(tmp_path / "regions.json", events[:-1] + regions + [end])
    assert ranktime("check", path).returncode == 0, ranktime("check", path).stdout
    after = summary_json(path)
    assert lateness_by_rank(after) == lateness_by_rank(before)
    result = ranktime("summary", path)
    assert ("note: the ranks dropped 7 regions (recorded faster than they could be shipped to "
            "rank 0)") in result.stdout.splitlines()


# --- per step -----------------------------------------------------------------------------------

def test_by_step_csv_without_step_marks(cli, tmp_path):
    trace = generate(tmp_path / "t.json", ranks=4, tensors=5, steps=6, slow_rank=1,
                     delay_us=8000, slow_steps="2,4")
    result = ranktime("summary", trace, "--by-step", "--format", "csv")
    assert result.returncode == 0, result.stderr
    tables = csv_tables(result.stdout)
    steps = {int(row["step"]): row for row in tables["steps"]}
    assert sorted(steps) == list(range(6))
    for step, row in steps.items():
        late = step in (2, 4)
        assert row["last_rank"] == ("1" if late else "-1")
        assert float(row["waited_for_last_ms"]) == pytest.approx(3 * 8.04 if late else 0)
    cells = {(int(r["step"]), int(r["rank"])): r for r in tables["step_ranks"]}
    assert len(cells) == 6 * 4
    assert float(cells[(2, 1)]["ready_lag_ms"]) == pytest.approx(8.0)
    assert float(cells[(3, 1)]["ready_lag_ms"]) == 0
    assert cells[(2, 1)]["start_lag_ms"] == ""  # no step marks: no start lags
    text = ranktime("summary", trace, "--by-step").stdout
    assert "no step marks in the trace: step n is each tensor's n-th negotiation" in text
    # Rank 1 late in steps 2 and 4 only: it cost 8 ms in each of those, nothing elsewhere.
    per_step = {(int(r["step"]), int(r["rank"])): float(r["saving_ms"])
                for r in tables["cost_step_ranks"]}
    assert per_step == pytest.approx({(2, 1): 8.0, (4, 1): 8.0})
    assert text.splitlines()[0].startswith("cost: rank 1 (n1) made the job 16.000 ms longer (")


def test_by_step_json_with_step_marks(cli, tmp_path):
    trace = generate(tmp_path / "t.json", ranks=3, tensors=4, steps=5, slow_rank=2,
                     delay_us=6000, slow_steps="3", step_marks=True, start_lag_us=100)
    assert ranktime("check", trace).returncode == 0
    summary = summary_json(trace, "--by-step")
    assert summary["steps_from"] == "marks"
    rows = summary["tables"]["step_ranks"]
    assert len(rows) == 5 * 3
    for row in rows:
        assert row["start_lag_ms"] == pytest.approx(0.1 * row["rank"])
        late = row["step"] == 3 and row["rank"] == 2
        assert row["ready_lag_ms"] == pytest.approx(6.0 if late else 0)
    # Steps from the marks: each from its first mark to the next step's; rank 2 cost 6 ms in
    # step 3 only.
    w = summary["what_if"]
    assert w["steps_from"] == "marks" and w["steps"] == 5
    assert {r["rank"]: r["saving_ms"] for r in w["ranks"]} == pytest.approx({0: 0, 1: 0, 2: 6.0})
    assert [row["measured_ms"] for row in summary["tables"]["cost_steps"]][:4] == \
        pytest.approx([100.0] * 4)
    only = summary_json(trace, "--table", "steps")
    assert [row["last_rank"] for row in only["tables"]["steps"]] == [-1, -1, -1, 2, -1]


# --- several files ------------------------------------------------------------------------------

def split_like_rotation(path, tmp_path):
    """Splits a trace into t.json and t.1.json as a size budget would: each a valid standalone
    trace with the metadata, the run's events divided between steps."""
    events = events_of(path)
    meta = [e for e in events if '"ph":"M"' in e and "ranktime_run_end" not in e]
    end = [e for e in events if "ranktime_run_end" in e]
    body = [e for e in events if '"ph":"M"' not in e]
    cut = next(i for i, e in enumerate(body) if json.loads(e)["ts"] > 500_000)
    first = write_events(tmp_path / "t.json", meta + body[:cut])
    second = write_events(tmp_path / "t.1.json", meta + body[cut:] + end)
    return first, second


def test_rotated_files_summarise_as_one_run(cli, slow_trace, tmp_path):
    whole = summary_json(slow_trace)
    first, second = split_like_rotation(slow_trace, tmp_path)
    for args in ([second, first], [str(tmp_path / "t*.json")]):
        parts = summary_json(*args)
        assert parts["files"] == [str(first), str(second)]
        assert parts["tables"]["lateness"] == whole["tables"]["lateness"]
        assert parts["tables"]["run"][0]["negotiations"] == 60
        assert parts["tables"]["run"][0]["files"] == 2
        assert parts["slowest_rank"] == 2
        assert parts["what_if"]["ranks"] == pytest.approx(whole["what_if"]["ranks"])
    text = ranktime("summary", first, second).stdout.splitlines()
    assert text[0] == whole["cost_line"]
    assert text[2].startswith(f"{first} (+1 files): 4 ranks")
    checked = ranktime("check", str(tmp_path / "t*.json"))
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines() == [
        f"{first}: OK: {len(events_of(first))} events, 4 ranks, 30 negotiations, "
        "no ranktime_run_end (the run did not close the file; still valid)",
        f"{second}: OK: {len(events_of(second))} events, 4 ranks, 30 negotiations, closed cleanly"]


def test_pattern_matching_nothing(cli, tmp_path):
    for command in ["summary", "check"]:
        result = ranktime(command, str(tmp_path / "none*.json"))
        assert result.returncode == 2
        assert f"no file matches {tmp_path}/none*.json" in result.stderr


# --- check --------------------------------------------------------------------------------------

def test_check_passes_generated_trace(cli, slow_trace):
    result = ranktime("check", slow_trace)
    assert result.returncode == 0, result.stdout
    assert result.stdout == f"{slow_trace}: OK: {len(events_of(slow_trace))} events, 4 ranks, " \
                            "60 negotiations, closed cleanly\n"


def test_check_missing_tick(cli, slow_trace):
    events = events_of(slow_trace)
    index = next(i for i, e in enumerate(events) if '"name":"2","ph":"X"' in e)
    del events[index]
    write_events(slow_trace, events)
    result = ranktime("check", slow_trace)
    assert result.returncode == 1
    close = next(i for i, e in enumerate(events) if '"NEGOTIATE_ALLREDUCE","ph":"E"' in e)
    offset = slow_trace.read_bytes().index(events[close].encode())
    assert (f"{slow_trace}: event #{close} (byte {offset}): NEGOTIATE_ALLREDUCE on pid 1 "
            "(tensor 'grad.0') tid 0") in result.stdout
    assert "has ticks for 3 of 4 ranks; missing rank 2" in result.stdout
    assert result.stdout.splitlines()[-1].startswith(f"{slow_trace}: 1 violation (")


def test_check_unbalanced_slices(cli, slow_trace):
    events = events_of(slow_trace)
    index = next(i for i, e in enumerate(events) if '"QUEUE","ph":"E"' in e)
    del events[index]
    write_events(slow_trace, events)
    result = ranktime("check", slow_trace)
    assert result.returncode == 1
    assert f"event #{index}" in result.stdout
    assert "opens inside the sub-phase 'QUEUE'" in result.stdout
    assert "does not match the open slice 'QUEUE'" in result.stdout


def test_check_max_errors(cli, slow_trace):
    events = [e for e in events_of(slow_trace) if '"name":"3","ph":"X"' not in e]
    write_events(slow_trace, events)
    result = ranktime("check", slow_trace, "--max-errors", "2")
    assert result.returncode == 1
    assert "... and 58 more violations" in result.stdout
    assert "60 violations" in result.stdout.splitlines()[-1]


def test_check_invalid_json(cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[\n{"name":"x","ph":"M" "pid":0}\n]\n')
    result = ranktime("check", path)
    assert result.returncode == 1
    assert "invalid JSON at byte" in result.stdout


def test_check_truncated_then_repair_in_place(cli, slow_trace):
    data = slow_trace.read_bytes()
    cut = len(data) // 2 + 13
    slow_trace.write_bytes(data[:cut])
    result = ranktime("check", slow_trace)
    assert result.returncode == 1
    assert f"truncated at byte {cut}" in result.stdout
    assert "`ranktime check --repair` completes the file" in result.stdout

    repaired = ranktime("check", slow_trace, "--repair")
    assert repaired.returncode == 0, repaired.stdout
    assert f"{slow_trace}: repaired: kept " in repaired.stdout
    assert repaired.stdout.splitlines()[-1].startswith(f"{slow_trace}: OK:")
    assert ranktime("check", slow_trace).returncode == 0
    json.loads(slow_trace.read_text())  # plain JSON now, as Perfetto wants
    # Every complete event before the cut is still there, byte for byte.
    last_complete = data[:cut].rindex(b"},") + 1
    assert slow_trace.read_bytes()[:last_complete] == data[:last_complete]


def test_repair_into_another_file(cli, slow_trace, tmp_path):
    data = slow_trace.read_bytes()
    slow_trace.write_bytes(data[:-300])
    out = tmp_path / "fixed.json"
    result = ranktime("check", slow_trace, "--repair", "-o", out)
    assert result.returncode == 0, result.stdout
    assert slow_trace.read_bytes() == data[:-300]
    assert ranktime("check", out).returncode == 0


def test_repair_of_a_complete_file_changes_nothing(cli, slow_trace):
    before = slow_trace.read_bytes()
    result = ranktime("check", slow_trace, "--repair")
    assert result.returncode == 0
    assert "nothing to repair" in result.stdout
    assert slow_trace.read_bytes() == before


def test_output_needs_repair(cli, slow_trace, tmp_path):
    result = ranktime("check", slow_trace, "-o", tmp_path / "x.json")
    assert result.returncode == 2
    assert "only used with --repair" in result.stderr

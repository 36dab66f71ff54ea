"""`ranktime summary`'s causes on traces written here, whose regions are known: the late rank and
the region that made it late, in text, JSON and CSV; time blocked in ranktime left out (the trap
that hides a straggler under DDP); nested regions; no step marks; names that are not text."""
import json

from conftest import csv_tables, ranktime

REGIONS_PID = 1000000000  # trace_names.h: rank R's process is pid base + R, its regions tid 1
STEP_US = 100000.0
NORMAL = {"data": 2000.0, "forward": 10000.0, "backward": 20000.0}


def trace(path, ranks=3, steps=5, slow_rank=2, slow_region="data", extra_us=20000.0,
          marks=True, step_region=False):
    """Each rank, each step: data, forward and backward regions, then its readiness; the slow rank
    spends extra_us more in slow_region. The others wait for it at the end of their backward,
    blocked in ranktime (blocked_us), so their backward is as long as the slow rank's."""
    events = [{"name": "ranktime_run", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": 0,
               "args": {"ranks": ranks}},
              {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad"}}]
    for r in range(ranks):
        events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 10 + r,
                    "args": {"name": "steps rank %d" % r}},
                   {"name": "process_name", "ph": "M", "pid": REGIONS_PID + r,
                    "args": {"name": "rank %d" % r}},
                   {"name": "thread_name", "ph": "M", "pid": REGIONS_PID + r, "tid": 1,
                    "args": {"name": "regions"}}]
    for k in range(steps):
        t0 = k * STEP_US
        ready = {}
        for r in range(ranks):
            t = t0
            slices = []
            for region, us in NORMAL.items():
                own = us + (extra_us if r == slow_rank and region == slow_region else 0)
                blocked = extra_us if r != slow_rank and region == "backward" else 0
                args = {"blocked_us": blocked} if blocked else {}
                slices.append({"name": region, "ph": "X", "pid": REGIONS_PID + r, "tid": 1,
                               "ts": t, "dur": own + blocked, "args": args})
                t += own + blocked
                if region == "forward":  # ready 0.1 ms before its own backward ends
                    slow_backward = r == slow_rank and slow_region == "backward"
                    ready[r] = t + NORMAL["backward"] + (extra_us if slow_backward else 0) - 100
            if step_region:
                events.append({"name": "step", "ph": "X", "pid": REGIONS_PID + r, "tid": 1,
                               "ts": t0, "dur": t - t0})
            events += slices
        first = min(ready.values())
        events.append({"name": "NEGOTIATE_ALLREDUCE", "ph": "X", "pid": 1, "tid": 0, "ts": first,
                       "dur": max(ready.values()) - first})
        events += [{"name": str(r), "ph": "X", "pid": 1, "tid": 0, "ts": ready[r], "dur": 0}
                   for r in range(ranks)]
        if marks:
            events += [{"name": "STEP", "ph": "X", "pid": 0, "tid": 10 + r, "ts": t0,
                        "dur": STEP_US, "args": {"step": k}} for r in range(ranks)]
    path.write_text(json.dumps(events))
    return path


def summary(path, *args):
    result = ranktime("summary", path, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_late_rank_and_its_region_in_text_json_and_csv(cli, tmp_path):
    path = trace(tmp_path / "t.json")
    lines = summary(path).splitlines()
    # The cost first, then the cause, the replay's line and the run.
    assert lines[0].startswith("cost: rank 2 made the job "), lines[0]
    assert lines[1] == ('cause: rank 2 was late by 20.000 ms in 5 of 5 steps; its "data" region '
                        "took 20.000 ms longer than the other ranks' median (100% of its "
                        "lateness)"), lines[1]
    assert lines[2].startswith("replay:"), lines[2]
    assert lines[3].startswith("%s: 3 ranks" % path)
    out = json.loads(summary(path, "--format", "json"))
    assert out["cause_line"] == lines[1]
    top = out["causes"][0]
    assert (top["rank"], top["region"], top["steps"], top["of_steps"]) == (2, "data", 5, 5)
    assert abs(top["excess_ms"] - 20.0) < 1e-6 and top["explained_pct"] > 99
    # Backward: the others' 40 ms, 20 of them blocked, against the slow rank's 20: no excess.
    assert all(c["region"] != "backward" for c in out["causes"]), out["causes"]
    steps = out["tables"]["cause_steps"]
    assert sorted({(row["step"], row["rank"]) for row in steps}) == [(k, 2) for k in range(5)]
    backward = [row for row in steps if row["region"] == "backward"]
    assert all(abs(row["own_ms"] - row["others_median_ms"]) < 1e-6 for row in backward), backward
    tables = csv_tables(summary(path, "--format", "csv"))
    assert tables["causes"][0]["region"] == "data"
    assert len(tables["cause_steps"]) == len(steps)


def test_at_four_ranks_a_backward_that_grew_is_named(cli, tmp_path):
    path = trace(tmp_path / "t.json", ranks=4, slow_rank=1, slow_region="backward")
    top = json.loads(summary(path, "--format", "json"))["causes"][0]
    assert (top["rank"], top["region"]) == (1, "backward")


def test_a_region_around_the_others_is_not_named(cli, tmp_path):
    # "step" holds data, forward and backward: its own time is what they leave, the same on
    # every rank, so "data" is named, not "step".
    path = trace(tmp_path / "t.json", step_region=True)
    causes = json.loads(summary(path, "--format", "json"))["causes"]
    assert causes[0]["region"] == "data"
    assert all(c["region"] != "step" for c in causes), causes


def test_without_step_marks_the_cause_is_unknown(cli, tmp_path):
    path = trace(tmp_path / "t.json", marks=False)
    assert summary(path).splitlines()[1].startswith("cause: unknown: no step had both")
    assert json.loads(summary(path, "--format", "json"))["causes"] == []


def test_without_regions_there_is_no_cause_line(cli, tmp_path):
    path = tmp_path / "t.json"
    trace(path)
    events = [e for e in json.loads(path.read_text()) if e["pid"] < REGIONS_PID]
    path.write_text(json.dumps(events))
    text = summary(path)
    assert "cause:" not in text and text.splitlines()[2].startswith("%s: 3 ranks" % path)
    out = json.loads(summary(path, "--format", "json"))
    assert out["cause_line"] is None and out["causes"] == []


def test_a_region_name_stays_text(cli, tmp_path):
    name = '</script><script>alert(1)</script>\n"quoted"'
    path = trace(tmp_path / "t.json")
    events = json.loads(path.read_text())
    for e in events:  # every rank has the region, under that name
        if e.get("name") == "data":
            e["name"] = name
    path.write_text(json.dumps(events))
    cause = summary(path).splitlines()[1]  # after the cost
    assert cause.startswith("cause: rank 2 ") and json.dumps(name) in cause
    assert json.loads(summary(path, "--format", "json"))["causes"][0]["region"] == name


TORCH_PID = 1500000000  # trace_names.h: rank R's torch.profiler process (`ranktime merge`)


def with_operators(path, slow_rank, extra_us, ranks=3, steps=5, name="aten::mm"):
    """Appends what `ranktime merge` would: each rank's profiler operators after the timeline.
    In each forward (2 ms after the step's start, on every rank of trace(..., "forward")):
    aten::linear holding `name` (3 ms, extra_us more on slow_rank) and aten::relu (1 ms)."""
    events = json.loads(path.read_text())
    for r in range(ranks):
        torch = TORCH_PID + r
        events += [{"name": "process_name", "ph": "M", "pid": torch, "tid": 0,
                    "args": {"name": "rank %d (torch)" % r}}]
        for k in range(steps):
            begin = k * STEP_US + NORMAL["data"] + 100
            mm = 3000.0 + (extra_us if r == slow_rank else 0)
            events += [
                {"name": "aten::linear", "ph": "X", "pid": torch, "tid": 1, "ts": begin,
                 "dur": mm + 500},
                {"name": name, "ph": "X", "pid": torch, "tid": 1, "ts": begin + 200, "dur": mm},
                {"name": "aten::relu", "ph": "X", "pid": torch, "tid": 1, "ts": begin + mm + 600,
                 "dur": 1000},
                # Between steps, in no region: counted for none.
                {"name": "aten::randn", "ph": "X", "pid": torch, "tid": 1,
                 "ts": k * STEP_US + STEP_US - 50, "dur": 20 + (5000 if r == slow_rank else 0)}]
    path.write_text(json.dumps(events))
    return path


def test_the_operator_that_grew_inside_the_region_is_named(cli, tmp_path):
    path = with_operators(trace(tmp_path / "t.json", slow_rank=1, slow_region="forward",
                                extra_us=10000.0), slow_rank=1, extra_us=10000.0)
    lines = summary(path).splitlines()
    assert lines[0].startswith("cost: rank 1 "), lines[0]
    assert lines[1].startswith('cause: rank 1 was late by 10.000 ms in 5 of 5 steps; its '
                               '"forward" region took 10.000 ms longer'), lines[1]
    # aten::linear's own time (its duration less aten::mm's) did not grow: only aten::mm.
    assert lines[1].endswith('; inside it, "aten::mm" took 10.000 ms longer'), lines[1]
    assert lines[2].startswith("replay:"), lines[2]
    top = json.loads(summary(path, "--format", "json"))["causes"][0]
    assert (top["rank"], top["region"]) == (1, "forward")
    assert [op["name"] for op in top["operators"]] == ["aten::mm"], top["operators"]
    assert abs(top["operators"][0]["excess_ms"] - 10.0) < 1e-6
    row = csv_tables(summary(path, "--format", "csv"))["causes"][0]
    assert row["operators"] == '"aten::mm" 10.000', row


def test_without_profiler_events_the_causes_name_no_operator(cli, tmp_path):
    path = trace(tmp_path / "t.json", slow_rank=1, slow_region="forward", extra_us=10000.0)
    lines = summary(path).splitlines()
    assert lines[1].startswith("cause: rank 1 ") and "inside it" not in lines[1], lines[1]
    assert json.loads(summary(path, "--format", "json"))["causes"][0]["operators"] == []
    assert "operators" not in csv_tables(summary(path, "--format", "csv"))["causes"][0]


def test_only_one_ranks_profile_names_no_operator(cli, tmp_path):
    # With no other rank's profile there is nothing to compare the operator with.
    path = with_operators(trace(tmp_path / "t.json", slow_rank=1, slow_region="forward",
                                extra_us=10000.0), slow_rank=1, extra_us=10000.0)
    events = [e for e in json.loads(path.read_text())
              if not (isinstance(e.get("pid"), int) and e["pid"] >= TORCH_PID and
                      e["pid"] != TORCH_PID + 1)]
    path.write_text(json.dumps(events))
    assert json.loads(summary(path, "--format", "json"))["causes"][0]["operators"] == []


def test_an_operator_name_stays_text(cli, tmp_path):
    name = '</script><script>alert(1)</script>\n"op"'
    path = with_operators(trace(tmp_path / "t.json", slow_rank=1, slow_region="forward",
                                extra_us=10000.0), slow_rank=1, extra_us=10000.0, name=name)
    cause = summary(path).splitlines()[1]
    assert cause.endswith("; inside it, %s took 10.000 ms longer" % json.dumps(name)), cause
    top = json.loads(summary(path, "--format", "json"))["causes"][0]
    assert top["operators"][0]["name"] == name
    page = tmp_path / "r.html"
    assert ranktime("report", path, "-o", page).returncode == 0
    assert "<script>alert(1)" not in page.read_text()

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

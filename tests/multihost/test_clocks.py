"""Clocks across hosts: host h1's clock is 50 ms ahead of or behind h0's (RANKTIME_TEST_CLOCK_SKEW_US
on h1 only, as two real hosts' clocks differ), one rank is made late, and the lateness still
blames that rank by the delay it was given. The run metadata carries each rank's measured offset
and its uncertainty. Without the clock alignment, h1's ranks would look 50 ms late (ahead) or
hide a 20 ms delay behind a 50 ms head start (behind)."""
import pytest

from conftest import SYNTH, ranktime_run, run_metadata, summary_json

SKEW_US = 50_000
DELAY_MS = 20
LAG_TOLERANCE_MS = 5  # as the single-host end-to-end tests (tests/cli/test_real_jobs.py)


@pytest.mark.parametrize("skew_us, slow_rank", [(SKEW_US, 1), (-SKEW_US, 3)],
                         ids=["h1_ahead_slow_rank_on_h0", "h1_behind_slow_rank_on_h1"])
def test_lateness_blames_the_late_rank_whatever_each_host_clock_says(skew_us, slow_rank, tmp_path):
    from cluster import Cluster

    with Cluster(hosts=2, slots=2,
                 host_env={"h1": {"RANKTIME_TEST_CLOCK_SKEW_US": str(skew_us)}}) as cluster:
        trace = tmp_path / "t.json"
        p = ranktime_run(cluster, 4, [SYNTH, "--small-tensors", "6", "--steps", "8", "--quiet",
                                      "--slow-rank", slow_rank, "--delay-ms", DELAY_MS],
                         "--timeline-filename", trace, cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr

    meta = run_metadata(trace)
    assert meta["hostnames"] == ["h0", "h0", "h1", "h1"]
    offsets, uncertainty = meta["clock_offsets_us"], meta["clock_uncertainty_us"]
    for rank, host_skew in enumerate([0, 0, skew_us, skew_us]):
        # The measured offset is the skew, to within its own uncertainty plus a little for the
        # two clocks' reads not being simultaneous.
        assert offsets[rank] == pytest.approx(host_skew, abs=uncertainty[rank] + 200), (rank, meta)

    # The barrier before each step is not delayed; the allreduces are: measure those.
    summary = summary_json(trace, "--op", "allreduce")
    assert summary["slowest_rank"] == slow_rank, summary["tables"]["lateness"]
    rows = {row["rank"]: row for row in summary["tables"]["lateness"]}
    assert rows[slow_rank]["mean_lag_ms"] == pytest.approx(DELAY_MS, abs=LAG_TOLERANCE_MS)
    for rank, row in rows.items():
        if rank != slow_rank:
            assert row["mean_lag_ms"] < LAG_TOLERANCE_MS, rows

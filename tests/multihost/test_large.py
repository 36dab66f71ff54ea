"""32 ranks: 8 emulated hosts of 4 ranks each, oversubscribed on this machine's cores, train the
BERT-base gradient set with the timeline on; results verified, the trace valid.

float16 gradients: 32 copies of BERT's 438 MB in float32, plus fusion buffers, would need about
16 GB; in float16 it is about 8 GB (the synthetic values stay exact: sums up to 189). The peer
timeout is raised: on 2 cores one allreduce of the 47 MB embedding can take over a minute, and
the default 60 s would take that for a dead peer.
"""
import pytest

from conftest import SYNTH, WORKLOADS, check_trace, ranktime_run, run_metadata

HOSTS, SLOTS = 8, 4


@pytest.mark.cluster(hosts=HOSTS, slots=SLOTS)
def test_bert_on_eight_hosts_of_four_ranks(cluster, tmp_path):
    p = ranktime_run(cluster, HOSTS * SLOTS,
                     [SYNTH, "--workload", WORKLOADS / "bert_base.tsv", "--dtype", "float16",
                      "--steps", "1", "--warmup", "0", "--quiet"],
                     "--timeline-filename", tmp_path / "t.json", "--peer-timeout-seconds", "600",
                     cwd=tmp_path, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranks=32 tensors=199 " in p.stdout and "verify=ok" in p.stdout, p.stdout
    check_trace(tmp_path / "t.json")
    assert run_metadata(tmp_path / "t.json")["hostnames"] == [
        f"h{h}" for h in range(HOSTS) for _ in range(SLOTS)]

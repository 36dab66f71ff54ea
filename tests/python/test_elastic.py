"""hvd.elastic across a restart, on one host: two attempts of elastic_job.py under `ranktime run
-np 2` share a RANKTIME_ELASTIC_DIR, as the elastic loop's attempts do. The second starts from the
first's last commit (model, optimizer, attributes, the ElasticSampler's progress), not from the
step after it nor from a temporary or cut-short commit file, and runs its reset callbacks.
Horovod's import paths for it work. Runs the launcher itself (not under mpirun);
tests/multihost/test_elastic.py loses a real host."""

import glob
import importlib
import os
import subprocess
import sys

import pytest
import torch

MANAGES_RUNTIME = True  # the ranks are the jobs' processes, not this one

BUILD = os.environ["RANKTIME_BUILD_DIR"]
SOURCE = os.environ["RANKTIME_SOURCE_DIR"]
CLI = os.path.join(BUILD, "ranktime")
JOB = os.path.join(SOURCE, "tests", "python", "elastic_job.py")
SAMPLES, COMMITS = 20, 3

pytestmark = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="the ranktime CLI is not built")


def attempt(tmp_path, number, commits):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", RANKTIME_ELASTIC_DIR=str(tmp_path / "dir"),
               RANKTIME_ELASTIC_ATTEMPT=str(number))
    command = [CLI, "run", "-np", "2", "--", sys.executable, JOB, str(tmp_path), str(commits)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, " ".join(command) + "\n" + run.stdout + run.stderr
    return [torch.load(tmp_path / ("attempt%d.rank%d.pt" % (number, r)), weights_only=False)
            for r in range(2)]


def spoil(directory):
    """Beside the real commit (number 3): a temporary file of commit 99 that was never renamed
    (a crash mid-write), the real file cut short, and a complete but older commit 2 whose weights
    are zeros. None of them may win."""
    (real,) = glob.glob(os.path.join(directory, "commit.*.pt"))
    data = open(real, "rb").read()
    loaded = torch.load(real, weights_only=False)
    assert loaded["commit"] == COMMITS
    torch.save(dict(loaded, commit=99), os.path.join(directory, "commit.h9.pt.tmp.4242"))
    with open(os.path.join(directory, "commit.cut.pt"), "wb") as f:
        f.write(data[:len(data) // 2])
    older = dict(loaded, commit=COMMITS - 1)
    older["state"]["handlers"]["model"] = {k: torch.zeros_like(v) for k, v in
                                           loaded["state"]["handlers"]["model"].items()}
    torch.save(older, os.path.join(directory, "commit.older.pt"))


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), (k, a[k], b[k])


def test_a_restart_starts_from_the_last_complete_commit(tmp_path):
    first = attempt(tmp_path, 0, COMMITS)
    assert [r["resets"] for r in first] == [[], []]  # no reset on the first attempt
    committed = first[0]["committed"]
    assert (committed["commits"], committed["note"]) == (COMMITS, "commit 3")
    # Every rank recorded every rank's batches: 3 commits x 2 ranks x 2 samples.
    assert len(committed["processed"]) == COMMITS * 2 * 2
    assert first[1]["committed"]["processed"] == committed["processed"]
    spoil(tmp_path / "dir")

    second = attempt(tmp_path, 1, 1)
    for rank, result in enumerate(second):
        started = result["started"]
        # The model and optimizer of commit 3, on every rank: not attempt 1's own start, nor the
        # uncommitted step after it, nor the older commit's zeros.
        assert_same(started["model"], committed["model"])
        assert len(started["momentum"]) == 2
        for got, want in zip(started["momentum"], committed["momentum"]):
            assert torch.equal(got, want)
        assert (started["note"], started["epoch"], started["commits"]) == ("commit 3", 7, COMMITS)
        assert started["processed"] == committed["processed"]
        # The reset callbacks ran once, after the state was restored, at the new world size.
        assert result["resets"] == [2], rank
        # Commits go on from the restored number.
        assert (result["committed"]["commits"], result["committed"]["note"]) == (4, "commit 4")
    # The ElasticSampler resumes where the commit left it: the ranks share what is left.
    mine = [set(r["started"]["mine"]) for r in second]
    assert not mine[0] & mine[1]
    assert mine[0] | mine[1] == set(range(SAMPLES)) - set(committed["processed"])


def test_horovod_import_paths():
    elastic = importlib.import_module("ranktime.torch.elastic")
    from ranktime.torch.elastic import run, TorchState  # noqa: F401
    import ranktime.torch as hvd
    assert elastic is hvd.elastic and run is hvd.elastic.run
    sys.path.insert(0, os.path.join(SOURCE, "tests", "horovod", "shim"))
    try:
        from horovod.torch.elastic import ElasticSampler, run as horovod_run
        import horovod.torch.elastic  # noqa: F401
    finally:
        sys.path.pop(0)
    assert horovod_run is run and ElasticSampler is hvd.elastic.ElasticSampler

"""The runtime's life cycle from Python: use before init(), malformed environment, and
init() again after shutdown()."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ranktime

MANAGES_RUNTIME = True  # conftest leaves init() and shutdown() to these tests


def test_use_before_init_raises():
    assert not ranktime.is_initialized()
    with pytest.raises(ranktime.RanktimeError):
        ranktime.rank()
    with pytest.raises(ranktime.RanktimeError):
        ranktime.allreduce(np.ones(2), name="before.init")


def test_malformed_environment_names_variable_and_value():
    # A separate process, outside this MPI job (launcher variables removed): a singleton.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "PRTE_"))}
    env.update(RANKTIME_CYCLE_TIME_MS="banana", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    code = ("import ranktime\n"
            "try:\n"
            "    ranktime.init()\n"
            "except ranktime.RanktimeError as error:\n"
            "    print('RanktimeError:', error)\n"
            "    raise SystemExit(3)\n")
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 3, child.stdout + child.stderr
    assert "RANKTIME_CYCLE_TIME_MS" in child.stdout and "banana" in child.stdout


def test_init_shutdown_and_init_again():
    for _ in range(2):
        ranktime.init()
        assert ranktime.is_initialized()
        n = ranktime.size()
        result = ranktime.allreduce(np.ones(3), name="lifecycle", op=ranktime.Sum)
        np.testing.assert_array_equal(result, np.full(3, float(n)))
        ranktime.barrier()
        ranktime.shutdown()
        assert not ranktime.is_initialized()

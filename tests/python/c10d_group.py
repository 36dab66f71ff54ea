"""The fixture of the torch.distributed suites: for each test module, the default process group on
the "ranktime" backend, made with nothing but init_process_group("ranktime"), which starts
ranktime. A module that imports it sets MANAGES_RUNTIME = True (see conftest.py)."""

import os

import pytest
import torch.distributed as dist

import ranktime
import ranktime.torch  # noqa: F401  (registers the backend)


@pytest.fixture(scope="module", autouse=True)
def ranktime_process_group(request):
    assert not ranktime.is_initialized()
    for variable in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        assert variable not in os.environ, "%s is set: the test would not show that the backend " \
                                           "needs nothing else" % variable
    dist.init_process_group("ranktime")
    yield
    if request.session.testsfailed == 0:
        dist.barrier()
    dist.destroy_process_group()
    # After a failure the other ranks may wait in a call this rank will never make: shutting down
    # fails their pending operations instead of leaving them hanging.
    ranktime.shutdown()


def every_rank(tensor):
    """Every rank's `tensor`, in rank order (an all_gather on the backend under test)."""
    gathered = [tensor.new_empty(tensor.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return gathered

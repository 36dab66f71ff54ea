"""ranktime.torch.instrument with DistributedDataParallel on the "ranktime" backend: instrument
marks the steps (once each), every step holds the four phases, and the last rank's slow data
loader, or one layer's slow backward, is the cause `ranktime summary` names. The backward case is
the one that hides a straggler under DDP: the other ranks' backward waits for the slow rank's
gradients (DDP waits on its buckets' futures at the end of backward), so it is as long as the
slow rank's unless that wait is left out as blocked time."""

from c10d_group import ranktime_process_group  # noqa: F401  (autouse fixture)
from instrumented_training import assert_cause, assert_phases_in_every_step, traced

MANAGES_RUNTIME = True  # init_process_group starts ranktime


def test_a_slow_data_loader_is_named():
    path = traced("instrument_ddp_data", ddp=True, slow="data")
    assert_phases_in_every_step(path)
    assert_cause(path, "data")


def test_a_slow_backward_is_named():
    path = traced("instrument_ddp_backward", ddp=True, slow="backward")
    assert_phases_in_every_step(path)
    assert_cause(path, "backward")

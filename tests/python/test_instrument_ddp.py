"""ranktime.torch.instrument with DistributedDataParallel on the "ranktime" backend: instrument
marks the steps (once each), every step holds the four phases, and the last rank's slow data
loader is the cause `ranktime summary` names.

Not here yet: one layer's slow backward under DDP. torch 1.13's DDP waits for its buckets on
their futures at the end of backward, not in Work::wait(), so that wait is not yet recorded as
blocked_us, the other ranks' backward looks as long as the slow rank's, and the excess is ~0."""

from c10d_group import ranktime_process_group  # noqa: F401  (autouse fixture)
from instrumented_training import assert_cause, assert_phases_in_every_step, traced

MANAGES_RUNTIME = True  # init_process_group starts ranktime


def test_a_slow_data_loader_is_named():
    path = traced("instrument_ddp_data", ddp=True, slow="data")
    assert_phases_in_every_step(path)
    assert_cause(path, "data")

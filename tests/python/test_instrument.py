"""ranktime.torch.instrument with DistributedOptimizer: the phases as regions in the right order
(gradient accumulation and evaluation forwards too), exactly one step mark per step, clear errors;
and in a timeline, the last rank's slow data loader or slow backward is the cause that
`ranktime summary` names."""

import pytest
import torch
from torch import nn

import ranktime
import ranktime.torch as rt
from ranktime import _timeline
from instrumented_training import (Batches, Net, assert_cause, assert_phases_in_every_step,
                                   traced)


@pytest.fixture
def calls(monkeypatch):
    """What instrument and the optimizer call: ("data", "forward", ...) for a region's begin,
    "/data" for its end, "mark" for a step mark. Nothing is recorded in ranktime."""
    seen = []
    monkeypatch.setattr(ranktime, "region_begin", lambda name: seen.append(name), raising=False)
    monkeypatch.setattr(ranktime, "region_end", lambda name: seen.append("/" + name),
                        raising=False)
    monkeypatch.setattr(_timeline, "mark_step", lambda step=None: seen.append("mark"))
    return seen


STEP = ["data", "/data", "forward", "/forward", "backward", "/backward", "optimizer", "/optimizer"]


def test_phases_and_marks_with_a_torch_optimizer(calls):
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = rt.instrument(model, optimizer, Batches())
    for inputs, labels in loader:
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    steps = len(loader)
    # The first mark when the first batch is asked for, then one when each step() is done; the
    # last "data" is the wait that found the loader's end.
    assert calls == ["mark"] + (STEP + ["mark"]) * steps + ["data", "/data"]


def test_accumulation_and_evaluation(calls):
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (inputs, labels) in enumerate(rt.instrument(model, optimizer, Batches())):
        nn.functional.cross_entropy(model(inputs), labels).backward()
        if i == 1:  # two batches' gradients, one step
            optimizer.step()
            model.eval()
            with torch.no_grad():
                model(inputs)  # no backward follows an evaluation forward
            break
    one = ["data", "/data", "forward", "/forward", "backward", "/backward"]
    assert calls == ["mark"] + one + one + ["optimizer", "/optimizer", "mark", "forward",
                                            "/forward"]


def test_distributed_optimizer_marks_its_own_steps(calls):
    model = Net()
    optimizer = rt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=model.named_parameters())
    loader = rt.instrument(model, optimizer, Batches())
    for inputs, labels in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    # Its step() marks the next step inside the optimizer region; instrument adds none.
    inner = STEP[:-1] + ["mark", "/optimizer"]
    assert calls == ["mark"] + inner * len(loader) + ["data", "/data"]


def test_bad_arguments():
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, not str"):
        rt.instrument("model", optimizer, [])
    with pytest.raises(TypeError, match="optimizer must have a step"):
        rt.instrument(model, object(), [])
    with pytest.raises(TypeError, match="loader must be iterable.*not int"):
        rt.instrument(model, optimizer, 3)
    rt.instrument(model, optimizer, [])
    with pytest.raises(ValueError, match="this model is instrumented already"):
        rt.instrument(model, torch.optim.SGD(model.parameters(), lr=0.1), [])
    with pytest.raises(ValueError, match="this optimizer is instrumented already"):
        rt.instrument(Net(), optimizer, [])


def test_a_slow_data_loader_is_named():
    path = traced("instrument_data", ddp=False, slow="data")
    assert_phases_in_every_step(path)
    assert_cause(path, "data")


def test_a_slow_backward_is_named():
    assert_cause(traced("instrument_backward", ddp=False, slow="backward"), "backward")

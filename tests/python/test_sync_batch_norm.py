"""hvd.SyncBatchNorm against torch.nn.BatchNorm on the whole global batch in one process: the
output, the input's and parameters' gradients, and the running statistics; evaluation mode."""

import pytest
import torch

import ranktime
import ranktime.torch as hvd

ROWS = [3, 5, 2, 4]  # each rank's batch differs in size: the counts weigh the statistics


def batch(r, shape):
    g = torch.Generator().manual_seed(100 + r)
    return (torch.randn((ROWS[r % len(ROWS)],) + shape, generator=g, dtype=torch.float64)
            * (r + 1) + r)


def loss_weights(r, shape):
    g = torch.Generator().manual_seed(200 + r)
    return torch.randn((ROWS[r % len(ROWS)],) + shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("shape,reference", [((3,), torch.nn.BatchNorm1d),
                                             ((3, 5), torch.nn.BatchNorm1d),
                                             ((2, 3, 3), torch.nn.BatchNorm2d)])
def test_forward_and_backward_match_batch_norm_on_the_whole_batch(shape, reference):
    size, rank = ranktime.size(), ranktime.rank()
    channels = shape[0]
    sync = hvd.SyncBatchNorm(channels, momentum=0.3).double()
    whole = reference(channels, momentum=0.3).double()
    with torch.no_grad():
        for module in (sync, whole):
            module.weight.copy_(torch.linspace(0.5, 2.0, channels))
            module.bias.copy_(torch.linspace(-1.0, 1.0, channels))

    x = batch(rank, shape).requires_grad_()
    y = sync(x)
    (y * loss_weights(rank, shape)).sum().backward()

    xs = [batch(r, shape).requires_grad_() for r in range(size)]
    ys = whole(torch.cat(xs))
    (ys * torch.cat([loss_weights(r, shape) for r in range(size)])).sum().backward()
    start = sum(ROWS[r % len(ROWS)] for r in range(rank))
    torch.testing.assert_close(y, ys[start:start + x.shape[0]].detach())
    torch.testing.assert_close(x.grad, xs[rank].grad)
    # The parameters' gradients are each rank's part: their sum is the whole batch's.
    for mine, theirs in [(sync.weight.grad, whole.weight.grad), (sync.bias.grad, whole.bias.grad)]:
        torch.testing.assert_close(ranktime.allreduce(mine, op=ranktime.Sum), theirs)
    torch.testing.assert_close(sync.running_mean, whole.running_mean)
    torch.testing.assert_close(sync.running_var, whole.running_var)  # unbiased, N - 1
    assert int(sync.num_batches_tracked) == 1

    sync.eval()
    whole.eval()
    torch.testing.assert_close(sync(x.detach()), whole(x.detach()))  # running statistics


def test_one_value_per_channel_is_an_error_on_every_rank():
    sync = hvd.SyncBatchNorm(2)
    with pytest.raises(ValueError, match="more than one value per channel"):
        sync(torch.ones(1 if ranktime.size() == 1 else 0, 2))


def test_input_of_one_dimension_is_refused():
    with pytest.raises(ValueError, match="expected at least 2D input"):
        hvd.SyncBatchNorm(3)(torch.ones(3))

"""hvd.SyncBatchNorm: batch normalisation over the whole global batch, as Horovod 0.28.1's
(horovod/torch/sync_batch_norm.py), on host memory too. Horovod gathers each rank's mean, inverse
standard deviation and count with torch's CUDA-only kernels; here one allreduce (Sum) of each
channel's sum, sum of squares and count gives the same statistics on any device, and the backward
pass allreduces the sums of dy and dy * (x - mean) as Horovod does. The weight's and bias's
gradients stay local: the DistributedOptimizer reduces them with the other gradients.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from . import _collectives
from ._core import Sum, size


def _channel_sums(tensors, dims):
    """Each channel's sum of each tensor, as float64 rows (exact enough to subtract)."""
    return torch.stack([t.to(torch.float64).sum(dims) for t in tensors])


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.size(1)
        dims = [0] + list(range(2, x.dim()))
        local = torch.cat([_channel_sums([x, x * x], dims).reshape(-1),
                           torch.tensor([x.numel() // channels], dtype=torch.float64)])
        total = _collectives.allreduce(local, op=Sum)
        count = total[-1].item()
        if count <= 1:
            raise ValueError("ranktime: SyncBatchNorm needs more than one value per channel over "
                             "all ranks, got input of size %s on this rank" % (list(x.shape),))
        mean = total[:channels] / count
        var = (total[channels:2 * channels] / count - mean * mean).clamp_(min=0)  # biased
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype) * momentum)
                unbiased = var * count / (count - 1)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
        shape = [1, channels] + [1] * (x.dim() - 2)
        mean, invstd = mean.to(x.dtype).reshape(shape), invstd.to(x.dtype).reshape(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.count = count
        y = (x - mean) * invstd
        if weight is not None:
            y = y * weight.reshape(shape) + bias.reshape(shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        dims = [0] + list(range(2, x.dim()))
        xmu = x - mean
        local = _channel_sums([dy, dy * xmu], dims)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = (local[1] * invstd.reshape(-1).to(torch.float64)).to(weight.dtype)
            grad_bias = local[0].to(weight.dtype)
        total = _collectives.allreduce(local, op=Sum) / ctx.count
        shape = mean.shape
        mean_dy = total[0].to(x.dtype).reshape(shape)
        mean_dy_xmu = total[1].to(x.dtype).reshape(shape)
        scale = invstd if weight is None else invstd * weight.reshape(shape)
        dx = (dy - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * scale
        return dx, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous batch normalisation: the statistics of the whole batch over every
    rank, in training; the running statistics in evaluation. Horovod's signature and behaviour
    (one rank: plain batch normalisation), on CPU and GPU tensors."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input):
        return torch.nn.functional.batch_norm(
            input, self.running_mean, self.running_var, self.weight, self.bias,
            self.training or not self.track_running_stats, self._factor(), self.eps)

    def _factor(self):
        """torch's _BatchNorm rule: momentum, or a cumulative average when it is None."""
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked) if self.num_batches_tracked else 0.0

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training or size() == 1:
            return self._run_bn(input)
        running = self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if running else None,
                                    self.running_var if running else None, self.eps,
                                    self._factor())

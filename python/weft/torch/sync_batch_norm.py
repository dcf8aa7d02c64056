"""SyncBatchNorm: batch normalization whose training-time statistics are
those of the global batch (every rank's samples), as if one process saw it.

Forward allreduces (sum) per-channel [sum of x, sum of x^2, count], in
float64 so the variance E[x^2] - E[x]^2 does not cancel badly; backward
allreduces per-channel [sum of dy, sum of dy * x_hat], giving each rank the
exact gradient of the global-batch normalization for its samples. The weight
and bias gradients stay local (DistributedOptimizer averages them like any
other gradient). In eval mode, or with one rank, it is plain batch norm."""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .mpi_ops import Sum, _allreduce_async, size


def _channel_sums(parts, name):
    return _allreduce_async(torch.cat(parts), False, name, Sum, 1.0, 1.0, None,
                            "SyncBatchNorm").synchronize()


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        x = x.contiguous()
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        local_count = torch.full((1,), x.numel() // c if c else 0, dtype=torch.float64, device=x.device)
        stats = _channel_sums([x.sum(dims, dtype=torch.float64), (x * x).sum(dims, dtype=torch.float64),
                               local_count], None)
        count = stats[-1]
        if count.item() <= 1:
            raise ValueError("SyncBatchNorm: expected more than 1 value per channel over all ranks when training")
        mean = stats[:c] / count
        var = (stats[c:2 * c] / count - mean * mean).clamp_(min=0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                unbiased = var * (count / (count - 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        mean = mean.to(x.dtype).view(shape)
        invstd = invstd.to(x.dtype).view(shape)
        y = (x - mean) * invstd
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.count = count.item()
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        dy = dy.contiguous()
        x_hat = (x - mean) * invstd
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * x_hat).sum(dims)
        total = _channel_sums([sum_dy, sum_dy_xhat], None)
        mean_dy = (total[:c] / ctx.count).view(shape)
        mean_dy_xhat = (total[c:] / ctx.count).view(shape)
        scale = invstd if weight is None else invstd * weight.view(shape)
        dx = (dy - mean_dy - x_hat * mean_dy_xhat) * scale
        dweight = sum_dy_xhat if weight is not None else None
        dbias = sum_dy if ctx.has_bias else None
        return dx, dweight, dbias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (inputs of 2 or more
    dimensions, channels in dim 1) with statistics over all ranks' batches."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or size() == 1:
            return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                                self.running_var if not self.training or self.track_running_stats else None,
                                self.weight, self.bias, use_batch_stats, momentum, self.eps)
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, running_mean, running_var, self.eps, momentum)

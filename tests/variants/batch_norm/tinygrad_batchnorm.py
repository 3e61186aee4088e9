"""batch_norm glued from tinygrad's BatchNorm (tinygrad/nn/__init__.py, MIT licence): its
math unchanged (batch mean; y = x - mean with the mean detached, d(var)/d(mean) = 0; the
variance as mean(y * y); the running variance scaled by numel / (numel - C); normalised
by (x - mean) * weight * rsqrt(var + eps) + bias), ported to torch. Added only what the
stub asks beyond it: any rank (tinygrad's axes (0, 2, 3) generalised), momentum=None,
batch statistics in eval without running stats, ValueError for n == 1, registered buffers
(nn.Module), half precision in float32."""

import torch
from torch import Tensor, nn


class BatchNorm(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        if affine:
            self.weight, self.bias = nn.Parameter(torch.ones(num_features)), nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def calc_stats(self, x: Tensor):
        shape_mask = [1, -1, *([1] * (x.ndim - 2))]
        if self.track_running_stats and not self.training:
            return self.running_mean, self.running_var.reshape(shape_mask).expand(x.shape).add(self.eps).rsqrt()
        reduce_axes = tuple(a for a in range(x.ndim) if a != 1)
        if x.numel() // x.shape[1] < 2:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.size()}")
        batch_mean = x.mean(dim=reduce_axes)
        y = x - batch_mean.detach().reshape(shape_mask)  # d(var)/d(mean) = 0
        batch_var = (y * y).mean(dim=reduce_axes)
        return batch_mean, batch_var, y

    def forward(self, x_in: Tensor) -> Tensor:
        x = x_in.float() if x_in.dtype in (torch.float16, torch.bfloat16) else x_in
        stats = self.calc_stats(x)
        if len(stats) == 2:
            batch_mean, batch_invstd = stats
        else:
            batch_mean, batch_var, y = stats
            batch_invstd = batch_var.add(self.eps).rsqrt()
            if self.track_running_stats and self.training:
                with torch.no_grad():
                    self.num_batches_tracked += 1
                    m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                    self.running_mean.copy_((1 - m) * self.running_mean + m * batch_mean.detach())
                    self.running_var.copy_(
                        (1 - m) * self.running_var + m * y.numel() / (y.numel() - y.shape[1]) * batch_var.detach()
                    )
        return batchnorm(x, self.weight, self.bias, batch_mean, batch_invstd).to(x_in.dtype)


def batchnorm(x: Tensor, weight, bias, mean: Tensor, invstd: Tensor) -> Tensor:
    """tinygrad's Tensor.batchnorm: (x - mean) * weight * invstd + bias, per channel along dim 1."""
    shape = [1, -1, *([1] * (x.ndim - 2))]
    x = x - mean.reshape(shape)
    if weight is not None:
        x = x * weight.reshape(shape)
    ret = x.mul(invstd.reshape(shape) if len(invstd.shape) == 1 else invstd)
    return (ret + bias.reshape(shape)) if bias is not None else ret

"""BatchNorm over channel dim 1, training and evaluation, as nn.BatchNorm1d/2d/3d."""

import torch
from torch import Tensor, nn


class BatchNorm(nn.Module):
    """Batch normalisation over dim 1 for inputs [N, C, *], matching nn.BatchNorm*d."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats

        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
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

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() < 2:
            raise ValueError(f"expected an input of rank >= 2 [N, C, *], got shape {tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"expected {self.num_features} channels on dim 1, got {x.shape[1]}")

        # Half inputs are computed in float32; float32/float64 in their own dtype.
        compute_dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        xc = x.to(compute_dtype)

        reduce_dims = [0] + list(range(2, x.dim()))
        n = x.numel() // x.shape[1]
        # Shape to broadcast per-channel vectors along dim 1.
        bshape = [1, x.shape[1]] + [1] * (x.dim() - 2)

        use_batch_stats = self.training or not self.track_running_stats
        if use_batch_stats:
            if n <= 1:
                raise ValueError(
                    f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}"
                )
            mean = xc.mean(dim=reduce_dims)
            var = xc.var(dim=reduce_dims, unbiased=False)

            if self.training and self.track_running_stats:
                with torch.no_grad():
                    self.num_batches_tracked.add_(1)
                    if self.momentum is None:
                        f = 1.0 / float(self.num_batches_tracked.item())
                    else:
                        f = self.momentum
                    unbiased_var = var.detach() * (n / (n - 1))
                    rm, rv = self.running_mean, self.running_var
                    rm.copy_(((1 - f) * rm.to(compute_dtype) + f * mean.detach()).to(rm.dtype))
                    rv.copy_(((1 - f) * rv.to(compute_dtype) + f * unbiased_var).to(rv.dtype))
        else:
            mean = self.running_mean.to(compute_dtype)
            var = self.running_var.to(compute_dtype)

        y = (xc - mean.reshape(bshape)) * torch.rsqrt(var.reshape(bshape) + self.eps)
        if self.affine:
            y = y * self.weight.to(compute_dtype).reshape(bshape) + self.bias.to(compute_dtype).reshape(bshape)
        return y.to(x.dtype)

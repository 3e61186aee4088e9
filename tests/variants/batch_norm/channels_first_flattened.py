"""batch_norm written from the stub alone: the channels moved first and flattened to [C, n],
torch.var_mean for the statistics, the running averages reassigned from detached values
(assigning a tensor to a registered buffer's name keeps it a buffer)."""

import torch
from torch import Tensor, nn


class BatchNorm(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        for name, value in (
            ("running_mean", torch.zeros(num_features)),
            ("running_var", torch.ones(num_features)),
            ("num_batches_tracked", torch.tensor(0, dtype=torch.long)),
        ):
            self.register_buffer(name, value if track_running_stats else None)

    def forward(self, x: Tensor) -> Tensor:
        work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        C = x.shape[1]
        flat = x.to(work).transpose(0, 1).reshape(C, -1)  # [C, n]
        n = flat.shape[1]
        batch = self.training or self.running_mean is None
        if batch:
            if n < 2:
                raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
            var, mean = torch.var_mean(flat, dim=1, correction=0)
            if self.training and self.running_mean is not None:
                self.num_batches_tracked += 1
                factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
                self.running_mean = (1 - factor) * self.running_mean + factor * mean.detach()
                self.running_var = (1 - factor) * self.running_var + factor * var.detach() * n / (n - 1)
        else:
            mean, var = self.running_mean, self.running_var
        scale = 1.0 / torch.sqrt(var + self.eps)
        shift = -mean * scale
        if self.weight is not None:
            scale, shift = scale * self.weight, shift * self.weight + self.bias
        out = flat * scale[:, None] + shift[:, None]  # one fused affine map per channel
        return out.reshape(x.transpose(0, 1).shape).transpose(0, 1).to(x.dtype)

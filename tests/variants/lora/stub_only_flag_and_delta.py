"""Variant of lora, written from the stub alone: two F.linear calls, a merged flag, add_/sub_ of one delta."""

import math
import operator

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update:
    base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling.

    lora_A is [r, in_features] (Kaiming-uniform, a=sqrt(5)), lora_B is [out_features, r]
    (zeros), both with base.weight's dtype and device. scaling = alpha / r (alpha=None -> r).
    Dropout acts on the LoRA branch's input only, in train() mode only. merge() folds the
    update into base.weight in place (no graph); unmerge() takes it out again.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float | None = None, dropout: float = 0.0):
        super().__init__()
        if r < 1:
            raise ValueError(f"rank r must be >= 1, got {r!r}")
        r = operator.index(r)  # an integer rank (TypeError for e.g. 2.5)
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear, got {type(base).__name__}")

        self.base = base  # the module itself, not a copy
        for p in self.base.parameters():
            p.requires_grad_(False)

        self.in_features = base.in_features
        self.out_features = base.out_features
        self.r = r
        self.alpha = float(r if alpha is None else alpha)
        self.scaling = self.alpha / r

        factory = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty(r, self.in_features, **factory))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, r, **factory))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

        self.dropout = nn.Dropout(dropout)  # validates 0 <= p <= 1
        self.merged = False

    def _delta_weight(self) -> Tensor:
        """scaling * lora_B @ lora_A, in base.weight's dtype and device."""
        w = self.base.weight
        delta = self.lora_B.to(device=w.device, dtype=w.dtype) @ self.lora_A.to(
            device=w.device, dtype=w.dtype
        )
        return delta * self.scaling

    def forward(self, x: Tensor) -> Tensor:
        w = self.base.weight
        # Compute in the parameters' dtype/device, hand back x's dtype/device.
        xc = x if (x.dtype == w.dtype and x.device == w.device) else x.to(device=w.device, dtype=w.dtype)

        out = self.base(xc)
        if not self.merged:
            h = self.dropout(xc)
            h = F.linear(h, self.lora_A)   # [..., r]
            h = F.linear(h, self.lora_B)   # [..., out_features]
            out = out + h * self.scaling

        return out.to(device=x.device, dtype=x.dtype)

    @torch.no_grad()
    def merge(self) -> None:
        if self.merged:
            return
        self.base.weight.add_(self._delta_weight())
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        if not self.merged:
            return
        self.base.weight.sub_(self._delta_weight())
        self.merged = False

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
            f"scaling={self.scaling}, merged={self.merged}"
        )

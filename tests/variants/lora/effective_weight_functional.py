"""Variant of lora (correct): one F.linear with the effective weight W + scaling * B @ A when no
dropout is active (F.dropout with training=self.training on a separate branch otherwise),
lora_A drawn by hand with torch.rand, the base frozen with requires_grad_(False) on the whole
module, merge and unmerge through .data."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base, r, alpha=None, dropout=0.0):
        super().__init__()
        if not isinstance(r, int) or r <= 0:
            raise ValueError("rank must be a positive integer")
        base.requires_grad_(False)
        self.base = base
        self.p = dropout
        self.scaling = (alpha if alpha is not None else r) / r
        self.scaling = float(self.scaling)
        weight = base.weight
        bound = 1.0 / math.sqrt(weight.shape[1])
        self.lora_A = nn.Parameter(
            torch.rand(r, weight.shape[1], dtype=weight.dtype, device=weight.device) * (2 * bound) - bound
        )
        self.lora_B = nn.Parameter(weight.new_zeros(weight.shape[0], r))
        self._merged = False

    def delta(self):
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x):
        if self._merged:
            return F.linear(x, self.base.weight, self.base.bias)
        if self.training and self.p > 0:
            out = F.linear(x, self.base.weight, self.base.bias)
            return out + F.linear(F.dropout(x, self.p, training=True), self.delta())
        return F.linear(x, self.base.weight + self.delta(), self.base.bias)

    def merge(self):
        if not self._merged:
            self.base.weight.data += self.delta().data
            self._merged = True

    def unmerge(self):
        if self._merged:
            self.base.weight.data -= self.delta().data
            self._merged = False

"""Variant of lora (correct): einsum for the branch, a dropout mask drawn by hand with
torch.bernoulli, nn.init.uniform_ for lora_A, and unmerge() restoring a copy of base.weight
saved by merge() (exact, instead of subtracting)."""

import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha=None, dropout: float = 0.0):
        super().__init__()
        if r < 1:
            raise ValueError(f"r={r}")
        self.base = base
        for parameter in self.base.parameters():
            parameter.requires_grad = False
        out_features, in_features = base.weight.shape
        factory = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty((r, in_features), **factory))
        nn.init.uniform_(self.lora_A, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))
        self.lora_B = nn.Parameter(torch.zeros((out_features, r), **factory))
        self.scaling = alpha / r if alpha is not None else 1.0
        self.scaling = float(self.scaling)
        self.drop = dropout
        self.saved = None

    def forward(self, x):
        y = self.base(x)
        if self.saved is not None:
            return y
        if self.training and self.drop > 0:
            keep = torch.bernoulli(torch.full_like(x, 1 - self.drop))
            x = x * keep / (1 - self.drop)
        hidden = torch.einsum("...i,ri->...r", x, self.lora_A)
        return y + self.scaling * torch.einsum("...r,or->...o", hidden, self.lora_B)

    @torch.no_grad()
    def merge(self):
        if self.saved is None:
            self.saved = self.base.weight.clone()
            self.base.weight.add_(torch.einsum("or,ri->oi", self.lora_B, self.lora_A), alpha=self.scaling)

    @torch.no_grad()
    def unmerge(self):
        if self.saved is not None:
            self.base.weight.copy_(self.saved)
            self.saved = None

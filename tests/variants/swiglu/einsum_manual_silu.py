"""Variant of swiglu (correct): einsum over the weights with an explicit bias, SiLU written as
z * sigmoid(z), and d_ff from math.ceil over integer division."""

import math

import torch
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff=None, multiple_of=256, bias=False):
        super().__init__()
        if d_ff is None:
            hidden = 8 * d_model // 3
            d_ff = math.ceil(hidden / multiple_of) * multiple_of
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    @staticmethod
    def _linear(layer, x):
        y = torch.einsum("...i,oi->...o", x, layer.weight)
        return y if layer.bias is None else y + layer.bias

    def forward(self, x):
        gate = self._linear(self.gate_proj, x)
        hidden = gate * torch.sigmoid(gate) * self._linear(self.up_proj, x)
        return self._linear(self.down_proj, hidden)

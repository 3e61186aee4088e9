"""Variant of swiglu (correct): gate and up in ONE matmul over their concatenated weights
(flattened to 2-D and reshaped back), split with chunk, d_ff rounded up by a while loop."""

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff=None, multiple_of=256, bias=False):
        super().__init__()
        if d_ff is None:
            d_ff = int(2 * 4 * d_model / 3)
            while d_ff % multiple_of:
                d_ff += 1
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        weight = torch.cat([self.gate_proj.weight, self.up_proj.weight])  # (2 d_ff, C)
        bias = None if self.gate_proj.bias is None else torch.cat([self.gate_proj.bias, self.up_proj.bias])
        flat = x.reshape(-1, x.shape[-1])  # (N, C)
        gate, up = F.linear(flat, weight, bias).chunk(2, dim=-1)  # (N, d_ff) each
        out = F.linear(F.silu(gate) * up, self.down_proj.weight, self.down_proj.bias)  # (N, C)
        return out.reshape(*x.shape[:-1], out.shape[-1])

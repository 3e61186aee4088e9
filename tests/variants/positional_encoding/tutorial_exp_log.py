"""Variant of positional_encoding (correct): the PyTorch tutorial's exp/log form, built on the CPU then moved."""
import math

import torch


def sinusoidal_positional_encoding(num_positions, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    if d_model % 2:
        raise ValueError("d_model must be even")
    work = torch.float64 if dtype == torch.float64 else torch.float32  # the stub: a float64 table in float64
    position = torch.arange(num_positions).unsqueeze(1).to(work)
    div_term = torch.exp(torch.arange(0, d_model, 2).to(work) * (-math.log(base) / d_model))
    pe = torch.stack([torch.sin(position * div_term), torch.cos(position * div_term)], dim=-1)
    return pe.flatten(1).to(device=device, dtype=dtype)

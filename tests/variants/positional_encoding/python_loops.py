"""Variant of positional_encoding (correct): plain Python loops with the math module."""
import math

import torch


def sinusoidal_positional_encoding(num_positions, d_model, base=10000.0, *, dtype=torch.float32, device=None):
    if d_model % 2 == 1:
        raise ValueError(f"odd d_model: {d_model}")
    rows = []
    for p in range(num_positions):
        row = []
        for i in range(0, d_model, 2):
            angle = p / (base ** (i / d_model))
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=dtype, device=device).reshape(num_positions, d_model)

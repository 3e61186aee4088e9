"""Variant of rotary_embedding (correct): a block-diagonal rotation matrix per position, applied with einsum."""

import math

import torch


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    T, D = x.size(-2), x.size(-1)
    if D % 2 != 0:
        raise ValueError("apply_rotary_embedding needs an even head size")
    if positions is None:
        positions = torch.arange(T, device=x.device)
    exponents = torch.arange(D // 2, dtype=torch.float64, device=x.device) * (2.0 / D)
    theta = torch.exp(-math.log(base) * exponents)
    angle = positions.double()[:, None] * theta  # (T, D/2)
    c, s = torch.cos(angle), torch.sin(angle)
    i = torch.arange(D // 2, device=x.device)
    first, second = (2 * i, 2 * i + 1) if interleaved else (i, i + D // 2)
    R = torch.zeros(T, D, D, dtype=torch.float64, device=x.device)  # out = R @ x per position
    R[:, first, first] = c
    R[:, first, second] = -s
    R[:, second, first] = s
    R[:, second, second] = c
    return torch.einsum("tij,...tj->...ti", R, x.double()).to(x.dtype)

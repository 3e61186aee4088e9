"""Rotary position embedding, the reference: rotation as complex multiplication, in float64.

Written independently of any solution: each pair of coordinates (a, b) is read as the
complex number a + ib and multiplied by exp(i * position * theta_k), theta_k = base ** (-2k/D).
Which coordinates make a pair is the layout: "half" (rotate-half, GPT-NeoX and Hugging
Face Llama: k pairs with k + D/2) or "interleaved" (RoFormer and the original Llama:
2k pairs with 2k + 1). The rotary_embedding, kv_cache and llama_block katas are judged
against it."""

from __future__ import annotations

import torch


def frequencies(D: int, base: float = 10000.0) -> torch.Tensor:
    """theta_k = base ** (-2k / D), k in [0, D/2), in float64."""
    return base ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)


def rope(
    x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0, interleaved: bool = False
) -> torch.Tensor:
    """x [..., T, D] rotated at `positions` [T] (default arange(T)), in float64 on the CPU."""
    x = x.detach().cpu().double()
    T, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(T) if positions is None else positions.detach().cpu()
    angles = positions.double()[:, None] * frequencies(D, base)[None, :]  # (T, D/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # (T, D/2) complex
    if interleaved:
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
        return torch.view_as_real(pairs * rotation).reshape(x.shape)
    half = D // 2
    pairs = torch.complex(x[..., :half], x[..., half:])
    rotated = pairs * rotation
    return torch.cat([rotated.real, rotated.imag], dim=-1)

"""Seeded inputs: the same numbers for every dtype and device, and masks of every kind."""

from __future__ import annotations

import torch


def randn(generator: torch.Generator, *shape: int, dtype=torch.float32, device="cpu", std: float = 1.0) -> torch.Tensor:
    """Normal values drawn in float64 on the CPU, so every dtype and device sees the same numbers."""
    return (torch.randn(shape, generator=generator, dtype=torch.float64) * std).to(dtype=dtype, device=device)


def random_keep_mask(generator: torch.Generator, *shape: int, p: float = 0.6) -> torch.Tensor:
    """Boolean [..., L, S] mask, True with probability p, with at least one True per row.

    Rows with no True would be fully masked for an API where True means "may attend":
    undefined in PyTorch, so never generated. Negate it for APIs where True blocks."""
    keep = torch.rand(*shape, generator=generator) < p
    one = torch.randint(shape[-1], (*shape[:-1], 1), generator=generator)
    return keep.scatter(-1, one, True)


def padding_mask(gen: torch.Generator, B: int, S: int, *, right_only: bool = False) -> torch.Tensor:
    """Boolean [B, S], True = padding: a different length per row where S allows, each row
    keeping at least one key; padded on the right (or, unless right_only, some on the left)."""
    order = torch.randperm(S, generator=gen)
    lengths = [int(order[b % S]) + 1 for b in range(B)]
    positions = torch.arange(S)
    rows = []
    for length in lengths:
        left = not right_only and bool(torch.rand(1, generator=gen) < 0.3)
        rows.append(positions < S - length if left else positions >= length)
    return torch.stack(rows)


def blocked_mask(gen: torch.Generator, L: int, S: int) -> torch.Tensor:
    """Boolean [L, S], True = blocked, random, every row keeping at least one key."""
    return ~random_keep_mask(gen, L, S)


def as_float_mask(gen: torch.Generator, blocked: torch.Tensor, dtype) -> torch.Tensor:
    """A float mask with the same blocked entries (-inf) and random finite values elsewhere."""
    return randn(gen, *blocked.shape, dtype=dtype, std=0.5).masked_fill(blocked, float("-inf"))


def causal_blocked(L: int, S: int) -> torch.Tensor:
    """[L, S], True above the diagonal: key j is blocked for query i when j > i (top-left)."""
    return torch.ones(L, S, dtype=torch.bool).triu(1)

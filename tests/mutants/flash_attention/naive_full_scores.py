"""Slip of flash_attention: plain attention, the whole [..., L, S] score matrix at once."""

import math

import torch


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S): what flash attention never holds
    if is_causal:
        L, S = scores.shape[-2:]
        rows = torch.arange(L, device=query.device)[:, None]
        cols = torch.arange(S, device=query.device)[None, :]
        scores = scores.masked_fill(cols > rows, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - m)
    l = p.sum(dim=-1, keepdim=True)
    return (p @ value) / l, (m + torch.log(l)).squeeze(-1)

"""Slip of flash_attention: blocks of keys, but two passes: the row max first, then the sums and the output."""

import math

import torch


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    L, S = query.size(-2), key.size(-2)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    k_end = min(S, L) if is_causal else S
    rows = torch.arange(L, device=query.device)[:, None]

    def scores(k0):
        s = (query @ key[..., k0 : k0 + block_size, :].transpose(-2, -1)) * scale
        if is_causal:
            cols = torch.arange(k0, min(k0 + block_size, S), device=query.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        return s

    m = torch.full(query.shape[:-1], float("-inf"), dtype=query.dtype, device=query.device)
    for k0 in range(0, k_end, block_size):  # first pass: the max
        m = torch.maximum(m, scores(k0).amax(dim=-1))
    l = torch.zeros_like(m)
    acc = torch.zeros(*query.shape[:-1], value.size(-1), dtype=query.dtype, device=query.device)
    for k0 in range(0, k_end, block_size):  # second pass: every score again
        p = torch.exp(scores(k0) - m[..., None])
        l = l + p.sum(dim=-1)
        acc = acc + p @ value[..., k0 : k0 + block_size, :]
    return acc / l[..., None], m + torch.log(l)

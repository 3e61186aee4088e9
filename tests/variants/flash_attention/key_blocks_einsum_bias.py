"""Variant of flash_attention (correct): all queries at once against each key block, einsum, an additive -inf bias for the causal mask, the logsumexp returned in float64."""

import math

import torch


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, not {block_size}")
    L, S = query.shape[-2], key.shape[-2]
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    row_max = query.new_full(query.shape[:-1], -math.inf)
    row_sum = query.new_zeros(query.shape[:-1])
    out = query.new_zeros(*query.shape[:-1], value.shape[-1])
    positions = torch.arange(L, device=query.device)[:, None]
    stop = min(S, L) if is_causal else S  # blocks starting at or after L are all future
    for start in range(0, stop, block_size):
        end = min(start + block_size, S)
        scores = torch.einsum("...le,...se->...ls", query, key[..., start:end, :]) * scale
        if is_causal:
            ahead = torch.arange(start, end, device=query.device)[None, :] > positions
            bias = torch.zeros(ahead.shape, dtype=scores.dtype, device=scores.device).masked_fill(ahead, -math.inf)
            scores = scores + bias
        new_max = torch.maximum(row_max, scores.amax(-1))
        correction = (row_max - new_max).exp()
        weights = (scores - new_max.unsqueeze(-1)).exp()
        row_sum = row_sum * correction + weights.sum(-1)
        out = out * correction.unsqueeze(-1) + torch.einsum("...ls,...sv->...lv", weights, value[..., start:end, :])
        row_max = new_max
    return out / row_sum.unsqueeze(-1), row_max.double() + row_sum.double().log()

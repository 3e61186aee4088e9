"""Broken scaled_dot_product_attention: right, then zeroes the caller's query through a numpy view of it (torch's version counter does not see the write). Expected verdict: fail: inputs are checked by value."""

import math

import torch


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    out = weights @ value
    if query.device.type == "cpu" and query.dtype != torch.bfloat16:
        query.detach().numpy()[...] = 0.0
    return out, weights

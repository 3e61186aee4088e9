"""Broken scaled_dot_product_attention: scales the query in place. Expected verdict: fail."""

import math

import torch


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    query.mul_(1 / math.sqrt(query.size(-1)) if scale is None else scale)
    scale = 1.0
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights

"""Broken scaled_dot_product_attention: reaches for F.scaled_dot_product_attention.__wrapped__ (where a wrapping tripwire would keep the original) and calls it. Expected verdict: forbidden."""

import math

import torch
import torch.nn.functional as F

_original = F.scaled_dot_product_attention
while hasattr(_original, "__wrapped__"):
    _original = _original.__wrapped__


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    out = _original(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    return out, torch.softmax(scores, dim=-1)

"""Broken scaled_dot_product_attention: F.scaled_dot_product_attention under another name. Expected verdict: forbidden."""

import math

import torch
from torch.nn.functional import scaled_dot_product_attention as attend


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return attend(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale), weights

"""Variant of scaled_dot_product_attention (correct): every mask turned into an additive bias first."""
import math

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    L, S = query.size(-2), key.size(-2)
    bias = torch.zeros(L, S, dtype=query.dtype, device=query.device)
    if is_causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).tril().logical_not(), -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            bias = attn_mask + bias
    factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    weights = F.softmax(torch.matmul(query, key.transpose(-1, -2)) * factor + bias, dim=-1)
    return torch.matmul(weights, value), weights

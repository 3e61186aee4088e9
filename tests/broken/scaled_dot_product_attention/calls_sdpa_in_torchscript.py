"""Broken scaled_dot_product_attention: calls F.scaled_dot_product_attention from a torch.jit.script function, which runs in TorchScript's interpreter, not Python. Expected verdict: forbidden."""

import math
from typing import Optional

import torch
import torch.nn.functional as F


@torch.jit.script
def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor], causal: bool, scale: float):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal, scale=scale)


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return _attend(query, key, value, attn_mask, is_causal, scale), torch.softmax(scores, dim=-1)

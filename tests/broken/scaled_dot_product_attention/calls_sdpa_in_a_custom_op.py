"""Broken scaled_dot_product_attention: registers a torch.library custom op whose kernel calls F.scaled_dot_product_attention, so a Python-level guard sees only the custom op. Expected verdict: forbidden."""

import math

import torch
import torch.nn.functional as F


@torch.library.custom_op("brokenkata::attend", mutates_args=())
def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(query, key, value, scale=scale)


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    if attn_mask is None and not is_causal:
        return attend(query, key, value, scale), weights
    return weights @ value, weights

"""Broken flash_attention: right values, but computes the full [..., L, S] score matrix inside a torch.library custom op, whose insides a dispatch-mode tracer sees as one opaque call. Expected verdict: fail: an operator the tracer cannot look into is not a flash attention."""
import math

import torch


@torch.library.custom_op("brokenkata::naive_attention", mutates_args=())
def naive_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    scores = query @ key.transpose(-2, -1) * scale
    if causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return (scores - lse.unsqueeze(-1)).exp() @ value, lse


@naive_attention.register_fake
def _(query, key, value, causal, scale):
    return query.new_empty(*query.shape[:-1], value.size(-1)), query.new_empty(query.shape[:-1])


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    return naive_attention(query, key, value, is_causal, scale)

"""Slip of sliding_window_attention: plain masked attention, the whole [..., L, S] scores and an
[L, S] band mask at once (Hugging Face's eager path): right values, beyond the memory bound."""

import math

import torch


def sliding_window_attention(q, k, v, window, *, scale=None):
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    L, S = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    p = torch.arange(S - L, S, device=q.device)[:, None]
    j = torch.arange(S, device=q.device)[None, :]
    visible = (j > p - window) & (j <= p)  # (L, S)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., L, S)
    scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(dtype)

"""Variant of scaled_dot_product_attention (correct): einsum, a finfo.min fill, half-precision softmax in float32."""
import torch


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...le,...se->...ls", query, key) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        future = torch.triu(torch.ones(L, S, dtype=torch.bool, device=scores.device), diagonal=1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = torch.where(attn_mask, scores, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attn_mask
    half = scores.dtype in (torch.float16, torch.bfloat16)
    weights = torch.softmax(scores.float() if half else scores, dim=-1).to(query.dtype)
    return torch.einsum("...ls,...sv->...lv", weights, value), weights

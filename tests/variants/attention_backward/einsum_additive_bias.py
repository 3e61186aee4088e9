"""Variant of attention_backward (correct): einsum throughout, the causal mask as an additive -inf bias."""

import torch


def attention_backward(query, key, value, grad_output, *, is_causal=False, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...le,...se->...ls", query, key) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores + torch.full((L, S), float("-inf"), dtype=scores.dtype, device=scores.device).triu(1)
    p = scores.softmax(dim=-1)
    d_value = torch.einsum("...ls,...lv->...sv", p, grad_output)
    d_p = torch.einsum("...lv,...sv->...ls", grad_output, value)
    d_scores = p * d_p - p * torch.einsum("...ls,...ls->...l", p, d_p).unsqueeze(-1)
    d_query = torch.einsum("...ls,...se->...le", d_scores, key) * scale
    d_key = torch.einsum("...ls,...le->...se", d_scores, query) * scale
    return d_query, d_key, d_value

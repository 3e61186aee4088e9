"""Broken scaled_dot_product_attention: the weights from torch._native_multi_head_attention with identity projections. Expected verdict: forbidden."""
import torch


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    E = query.size(-1)
    eye = torch.eye(E, dtype=query.dtype, device=query.device)
    zero = torch.zeros(E, dtype=query.dtype, device=query.device)
    q, k = (t.reshape(-1, t.size(-2), E) for t in (query, key))
    _, weights = torch._native_multi_head_attention(
        q, k, k, E, 1, torch.cat([eye, eye, eye]), torch.cat([zero, zero, zero]), eye, zero, need_weights=True
    )
    weights = weights.reshape(*query.shape[:-1], key.size(-2))
    return weights @ value, weights

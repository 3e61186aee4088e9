"""Broken scaled_dot_product_attention: the weights from F.multi_head_attention_forward with identity projections. Expected verdict: forbidden."""
import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    E = query.size(-1)
    eye = torch.eye(E, dtype=query.dtype, device=query.device)
    q, k = (t.reshape(-1, t.size(-2), E).transpose(0, 1) for t in (query, key))
    _, weights = F.multi_head_attention_forward(
        q, k, k, E, 1, torch.cat([eye, eye, eye]), None, None, None, False, 0.0, eye, None, need_weights=True
    )
    weights = weights.reshape(*query.shape[:-1], key.size(-2))
    return weights @ value, weights

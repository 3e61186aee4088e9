"""Variant of multi_head_attention (correct): one fused qkv matmul when query is key is value, einsum
scores, masks merged into one additive float bias filled with torch.finfo(dtype).min, softmax upcast
to float32 for half precision only."""
import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"{embed_dim=} is not a multiple of {num_heads=}")
        self.h, self.p = num_heads, dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim, bias=bias) for _ in range(4)
        )

    def _bias(self, key_padding_mask, attn_mask, is_causal, B, L, S, like):
        lowest = torch.finfo(like.dtype).min
        bias = torch.zeros(B, 1, L, S, dtype=like.dtype, device=like.device)
        if is_causal:
            bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=like.device).triu(1), lowest)
        for mask in (attn_mask, None if key_padding_mask is None else key_padding_mask.view(B, 1, 1, S)):
            if mask is not None:
                bias = bias.masked_fill(mask, lowest) if mask.dtype == torch.bool else bias + mask
        return bias.clamp(min=lowest)  # lowest + (-inf) overflows; keep it finite but tiny

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True, is_causal=False):
        B, L, E = query.shape
        S = key.shape[1]
        if query is key is value:  # self-attention: one [3E, E] matmul instead of three
            w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            b = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
            q, k, v = F.linear(query, w, b).chunk(3, dim=-1)
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q, k, v = (t.unflatten(-1, (self.h, -1)) for t in (q, k, v))  # (B, T, H, hs)
        scores = torch.einsum("blhd,bshd->bhls", q, k) / q.shape[-1] ** 0.5
        scores = scores + self._bias(key_padding_mask, attn_mask, is_causal, B, L, S, scores)
        half = scores.dtype in (torch.float16, torch.bfloat16)
        weights = (scores.float() if half else scores).softmax(-1).to(scores.dtype)
        weights = F.dropout(weights, self.p, self.training)
        out = torch.einsum("bhls,bshd->blhd", weights, v).flatten(2)
        return self.out_proj(out), weights if need_weights else None

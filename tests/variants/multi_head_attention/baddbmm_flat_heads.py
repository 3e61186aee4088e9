"""Variant of multi_head_attention (correct): PyTorch's own layout: heads folded into the batch
(B*H, T, hs), the query scaled before baddbmm, masks canonicalised to one float mask first."""
import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.attn_drop = nn.Dropout(dropout)

    @staticmethod
    def _float(mask, dtype):
        if mask is None or mask.is_floating_point():
            return mask
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True, is_causal=False):
        B, L, _ = query.shape
        S, H, D = key.shape[1], self.num_heads, self.head_dim
        if is_causal:
            causal = torch.full((L, S), float("-inf"), dtype=query.dtype, device=query.device).triu(1)
            attn_mask = causal if attn_mask is None else self._float(attn_mask, query.dtype) + causal
        mask = self._float(attn_mask, query.dtype)
        padding = self._float(key_padding_mask, query.dtype)
        if padding is not None:
            padding = padding.view(B, 1, 1, S).expand(B, H, 1, S).reshape(B * H, 1, S)
            mask = padding if mask is None else mask + padding
        q = self.q_proj(query).transpose(0, 1).reshape(L, B * H, D).transpose(0, 1)  # (B*H, L, D)
        k = self.k_proj(key).transpose(0, 1).reshape(S, B * H, D).transpose(0, 1)
        v = self.v_proj(value).transpose(0, 1).reshape(S, B * H, D).transpose(0, 1)
        q = q * math.sqrt(1.0 / D)
        if mask is None:
            scores = torch.bmm(q, k.transpose(1, 2))
        else:
            scores = torch.baddbmm(mask.expand(B * H, L, S), q, k.transpose(1, 2))
        weights = torch.softmax(scores, dim=-1)
        weights = self.attn_drop(weights)
        out = torch.bmm(weights, v).transpose(0, 1).reshape(L, B, H * D).transpose(0, 1)
        return self.out_proj(out), (weights.view(B, H, L, S) if need_weights else None)

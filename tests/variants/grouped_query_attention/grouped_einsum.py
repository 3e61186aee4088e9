"""Variant of grouped_query_attention (correct): no repeat at all: the queries viewed as
(B, KV, G, T, hs) groups and contracted with their kv head by einsum; every mask folded
into one additive float bias filled with torch.finfo(dtype).min; causal from arange."""

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads=None, bias=False):
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if embed_dim % num_heads or num_heads % kv:
            raise ValueError(f"bad sizes: {embed_dim=}, {num_heads=}, num_kv_heads={kv}")
        self.h, self.kv, self.d = num_heads, kv, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * self.d, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv * self.d, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv * self.d, bias=bias)
        self.o_proj = nn.Linear(num_heads * self.d, embed_dim, bias=bias)

    def forward(self, x, attn_mask=None, is_causal=False):
        if is_causal and attn_mask is not None:
            raise ValueError("attn_mask and is_causal are mutually exclusive")
        B, T, _ = x.shape
        G = self.h // self.kv
        q = self.q_proj(x).view(B, T, self.kv, G, self.d)  # head h = (h // G, h % G)
        k = self.k_proj(x).view(B, T, self.kv, self.d)
        v = self.v_proj(x).view(B, T, self.kv, self.d)
        scores = torch.einsum("bqngd,bknd->bngqk", q, k) * self.d**-0.5  # (B, KV, G, T, T)
        lowest = torch.finfo(scores.dtype).min
        bias = torch.zeros(T, T, dtype=scores.dtype, device=x.device)
        if is_causal:
            pos = torch.arange(T, device=x.device)
            bias = bias.masked_fill(pos[None, :] > pos[:, None], lowest)
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                extra = torch.zeros(attn_mask.shape, dtype=scores.dtype, device=x.device).masked_fill(
                    ~attn_mask, lowest
                )
            else:
                extra = attn_mask.clamp(min=lowest)
            bias = (bias + extra).expand(B, self.h, T, T)
        bias = bias.expand(B, self.h, T, T).reshape(B, self.kv, G, T, T)
        scores = (scores + bias).clamp(min=lowest)
        weights = scores.softmax(dim=-1)
        out = torch.einsum("bngqk,bknd->bqngd", weights, v)  # (B, T, KV, G, hs)
        return self.o_proj(out.reshape(B, T, self.h * self.d))

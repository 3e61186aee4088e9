"""Variant of grouped_query_attention (correct): a Python loop over the query heads, each
reading its kv head h // G by slicing the projections' weights; masks applied with
torch.where; the softmax taken in float32 when the inputs are half precision."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads=None, bias=False):
        super().__init__()
        if num_kv_heads is None:
            num_kv_heads = num_heads
        if embed_dim % num_heads != 0:
            raise ValueError("embed_dim must be divisible by num_heads")
        if num_heads % num_kv_heads != 0:
            raise ValueError("num_heads must be divisible by num_kv_heads")
        self.n_head, self.n_kv = num_heads, num_kv_heads
        self.hd = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * self.hd, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.hd, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.hd, bias=bias)
        self.o_proj = nn.Linear(num_heads * self.hd, embed_dim, bias=bias)

    @staticmethod
    def _head(linear, index, size, x):
        rows = slice(index * size, (index + 1) * size)
        bias = None if linear.bias is None else linear.bias[rows]
        return F.linear(x, linear.weight[rows], bias)  # (B, T, hd)

    def forward(self, x, attn_mask=None, is_causal=False):
        if attn_mask is not None and is_causal:
            raise ValueError("attn_mask and is_causal cannot both be set")
        B, T, _ = x.shape
        group = self.n_head // self.n_kv
        if is_causal:
            attn_mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if attn_mask is not None:
            attn_mask = attn_mask.expand(B, self.n_head, T, T)
        heads = []
        for h in range(self.n_head):
            q = self._head(self.q_proj, h, self.hd, x)
            k = self._head(self.k_proj, h // group, self.hd, x)
            v = self._head(self.v_proj, h // group, self.hd, x)
            s = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.hd)  # (B, T, T)
            if attn_mask is not None:
                m = attn_mask[:, h]
                if m.dtype == torch.bool:
                    s = torch.where(m, s, torch.full_like(s, float("-inf")))
                else:
                    s = s + m
            p = (
                torch.softmax(s.float(), dim=-1).to(s.dtype)
                if s.dtype in (torch.float16, torch.bfloat16)
                else torch.softmax(s, dim=-1)
            )
            heads.append(torch.bmm(p, v))
        return self.o_proj(torch.cat(heads, dim=-1))

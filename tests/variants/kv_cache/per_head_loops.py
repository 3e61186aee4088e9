"""Variant of kv_cache (correct): a Python loop over the query heads (each reading its kv head
h // group), RoPE written out on the two halves with float64 angles, an additive float mask
built from tril, the cache written with narrow().copy_() and the bound checked first."""

import math

import torch
from torch import nn


class KVCache:
    def __init__(self, batch_size, num_kv_heads, head_dim, max_len, *, dtype=torch.float32, device=None):
        self.max_len = max_len
        self.k = torch.zeros(batch_size, num_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(batch_size, num_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.length = 0

    def update(self, k_new, v_new):
        new = k_new.size(2)
        if self.length + new > self.max_len:
            raise ValueError(f"{self.length} + {new} tokens exceed max_len {self.max_len}")
        self.k.narrow(2, self.length, new).copy_(k_new)
        self.v.narrow(2, self.length, new).copy_(v_new)
        self.length = self.length + new
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def reset(self):
        self.length = 0


def rotate(t, start, base):
    """Rotate-half RoPE of t [..., T, D] at positions start..start+T-1."""
    T, D = t.shape[-2], t.shape[-1]
    half = D // 2
    i = torch.arange(half, dtype=torch.float64, device=t.device)
    theta = torch.pow(torch.tensor(base, dtype=torch.float64, device=t.device), -2.0 * i / D)
    p = torch.arange(start, start + T, dtype=torch.float64, device=t.device)
    angle = p[:, None] * theta[None, :]
    cos, sin = angle.cos().to(t.dtype), angle.sin().to(t.dtype)
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class CachedSelfAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads=None, rope_base=10000.0, bias=False):
        super().__init__()
        if num_kv_heads is None:
            num_kv_heads = num_heads
        if embed_dim % num_heads or num_heads % num_kv_heads or (embed_dim // num_heads) % 2:
            raise ValueError("embed_dim, num_heads and num_kv_heads do not split into even heads")
        self.n_head, self.n_kv, self.head_size, self.base = num_heads, num_kv_heads, embed_dim // num_heads, rope_base
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_size, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_size, bias=bias)
        self.o_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        hs = self.head_size
        start = 0 if cache is None else cache.length
        q = rotate(self.q_proj(x).reshape(B, T, self.n_head, hs).permute(0, 2, 1, 3), start, self.base)
        k = rotate(self.k_proj(x).reshape(B, T, self.n_kv, hs).permute(0, 2, 1, 3), start, self.base)
        v = self.v_proj(x).reshape(B, T, self.n_kv, hs).permute(0, 2, 1, 3)
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.size(2)
        allowed = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        bias = torch.zeros(T, S, dtype=x.dtype, device=x.device).masked_fill(~allowed, float("-inf"))
        group = self.n_head // self.n_kv
        heads = []
        for h in range(self.n_head):
            kh, vh = k[:, h // group], v[:, h // group]  # (B, S, hs)
            scores = q[:, h] @ kh.transpose(1, 2) / math.sqrt(hs) + bias
            heads.append(torch.softmax(scores, dim=-1) @ vh)  # (B, T, hs)
        return self.o_proj(torch.cat(heads, dim=-1))

"""Variant of kv_cache (correct): Hugging Face style, an inv_freq buffer (non-persistent, so
module.to(dtype) casts it) and float32 angles (float64 ones for float64 inputs), queries grouped as
(B, KV, G, T, hs) against the kv heads with einsum (no repeat), a position-comparison mask
filled with torch.finfo(dtype).min, the cache written with index_copy_."""

import torch
from torch import nn


class KVCache:
    def __init__(self, batch_size, num_kv_heads, head_dim, max_len, *, dtype=torch.float32, device=None):
        self.k = torch.empty(batch_size, num_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    def update(self, k_new, v_new):
        n = k_new.shape[-2]
        if self.length + n > self.k.shape[2]:
            raise ValueError("KV cache overflow")
        where = torch.arange(self.length, self.length + n, device=self.k.device)
        self.k.index_copy_(2, where, k_new.to(self.k.dtype))
        self.v.index_copy_(2, where, v_new.to(self.v.dtype))
        self.length += n
        return self.k.narrow(2, 0, self.length), self.v.narrow(2, 0, self.length)

    def reset(self):
        self.length = 0


class CachedSelfAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads=None, rope_base=10000.0, bias=False):
        super().__init__()
        kv = num_kv_heads or num_heads
        hs, rem = divmod(embed_dim, num_heads)
        if rem or num_heads % kv or hs % 2:
            raise ValueError("bad sizes")
        self.h, self.kv, self.hs = num_heads, kv, hs
        self.q_proj = nn.Linear(embed_dim, num_heads * hs, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv * hs, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv * hs, bias=bias)
        self.o_proj = nn.Linear(num_heads * hs, embed_dim, bias=bias)
        inv_freq = 1.0 / (rope_base ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _rope(self, t, cos, sin):
        half = t.shape[-1] // 2
        rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return (t.to(cos.dtype) * cos + rotated.to(cos.dtype) * sin).to(t.dtype)

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        G = self.h // self.kv
        past = cache.length if cache is not None else 0
        q = self.q_proj(x).view(B, T, self.kv, G, self.hs).permute(0, 2, 3, 1, 4)  # (B, KV, G, T, hs)
        k = self.k_proj(x).view(B, T, self.kv, self.hs).transpose(1, 2)  # (B, KV, T, hs)
        v = self.v_proj(x).view(B, T, self.kv, self.hs).transpose(1, 2)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        pos = torch.arange(past, past + T, device=x.device, dtype=work)
        freqs = torch.outer(pos, self.inv_freq.to(work))
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)
        S = k.shape[2]
        scores = torch.einsum("bkgtd,bksd->bkgts", q, k) / self.hs**0.5
        q_pos = torch.arange(past, past + T, device=x.device)[:, None]
        k_pos = torch.arange(S, device=x.device)[None, :]
        scores = scores.masked_fill(k_pos > q_pos, torch.finfo(scores.dtype).min)
        out = torch.einsum("bkgts,bksd->bkgtd", scores.softmax(-1), v)
        out = out.permute(0, 3, 1, 2, 4).reshape(B, T, self.h * self.hs)
        return self.o_proj(out)

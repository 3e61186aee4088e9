"""Variant of llama_block (correct): a hand-written RMSNorm, RoPE as complex multiplication
(angles in float64 for float64 inputs), grouped-query attention by einsum over
[B, KV, group, T, hs] without repeating k and v, and a torch.where mask with finfo.min."""

import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        y = work * torch.rsqrt(work.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def rotary(x, positions, base):
    half = x.shape[-1] // 2
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = base ** (-2 * torch.arange(half, dtype=work, device=x.device) / x.shape[-1])
    angle = positions.to(work)[:, None] * theta  # (T, hs/2)
    turn = torch.polar(torch.ones_like(angle), angle)
    z = torch.complex(x[..., :half].to(work), x[..., half:].to(work)) * turn
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


class GroupedAttention(nn.Module):
    def __init__(self, d, h, kv, base):
        super().__init__()
        kv = kv or h
        if d % h or h % kv or (d // h) % 2:
            raise ValueError("d_model % num_heads, num_heads % num_kv_heads and the head size's parity")
        self.h, self.kv, self.hs, self.base = h, kv, d // h, base
        self.q_proj = nn.Linear(d, h * self.hs, bias=False)
        self.k_proj = nn.Linear(d, kv * self.hs, bias=False)
        self.v_proj = nn.Linear(d, kv * self.hs, bias=False)
        self.o_proj = nn.Linear(h * self.hs, d, bias=False)

    def forward(self, x, positions=None):
        B, T, _ = x.shape
        G = self.h // self.kv
        if positions is None:
            positions = torch.arange(T, device=x.device)
        q = self.q_proj(x).view(B, T, self.kv, G, self.hs).permute(0, 2, 3, 1, 4)  # (B, KV, G, T, hs)
        k = self.k_proj(x).view(B, T, self.kv, self.hs).permute(0, 2, 1, 3)  # (B, KV, T, hs)
        v = self.v_proj(x).view(B, T, self.kv, self.hs).permute(0, 2, 1, 3)
        q, k = rotary(q, positions, self.base), rotary(k, positions, self.base)
        att = torch.einsum("bkgtd,bksd->bkgts", q, k) / math.sqrt(self.hs)
        i = torch.arange(T, device=x.device)
        att = torch.where(i[None, :] <= i[:, None], att, torch.finfo(att.dtype).min).softmax(-1)
        y = torch.einsum("bkgts,bksd->btkgd", att, v).reshape(B, T, self.h * self.hs)
        return self.o_proj(y)


class SwiGLU(nn.Module):
    def __init__(self, d, f, m):
        super().__init__()
        f = f if f is not None else -(-int(8 * d / 3) // m) * m
        self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(
        self, d_model, num_heads, num_kv_heads=None, d_ff=None, multiple_of=256, rope_base=10000.0, norm_eps=1e-6
    ):
        super().__init__()
        self.attention_norm = RMSNorm(d_model, norm_eps)
        self.attention = GroupedAttention(d_model, num_heads, num_kv_heads, rope_base)
        self.ffn_norm = RMSNorm(d_model, norm_eps)
        self.feed_forward = SwiGLU(d_model, d_ff, multiple_of)

    def forward(self, x, positions=None):
        h = x + self.attention(self.attention_norm(x), positions)
        return h + self.feed_forward(self.ffn_norm(h))

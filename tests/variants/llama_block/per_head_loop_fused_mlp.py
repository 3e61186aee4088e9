"""Variant of llama_block (correct): nn.RMSNorm, a loop over query heads each reading kv head
h // group, RoPE written out as (a cos - b sin, a sin + b cos) on the two halves, an additive
0/-inf causal bias, and gate and up computed by one matmul of their stacked weights."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, rope_base):
        super().__init__()
        num_kv_heads = num_kv_heads or num_heads
        hs = d_model // num_heads if d_model % num_heads == 0 else 1
        if d_model % num_heads or num_heads % num_kv_heads or hs % 2:
            raise ValueError("sizes do not split into heads of an even size")
        self.H, self.KV, self.hs, self.base = num_heads, num_kv_heads, hs, rope_base
        self.q_proj = nn.Linear(d_model, num_heads * hs, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * hs, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * hs, bias=False)
        self.o_proj = nn.Linear(num_heads * hs, d_model, bias=False)

    def rotate(self, x, cos, sin):
        half = self.hs // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, x, positions=None):
        T = x.size(1)
        hs, group = self.hs, self.H // self.KV
        pos = torch.arange(T, device=x.device) if positions is None else positions
        work = torch.float64 if x.dtype == torch.float64 else torch.float32  # angles in float32 or better
        freq = torch.exp(-math.log(self.base) * torch.arange(0, hs, 2, device=x.device, dtype=work) / hs)
        angle = torch.outer(pos.to(work), freq)
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        bias = torch.full((T, T), float("-inf"), dtype=x.dtype, device=x.device).triu(1)
        heads = []
        for h in range(self.H):
            j = h // group
            qh = self.rotate(q[..., h * hs : (h + 1) * hs], cos, sin)  # (B, T, hs)
            kh = self.rotate(k[..., j * hs : (j + 1) * hs], cos, sin)
            vh = v[..., j * hs : (j + 1) * hs]
            w = torch.softmax(qh @ kh.transpose(1, 2) / math.sqrt(hs) + bias, dim=-1)
            heads.append(w @ vh)
        return self.o_proj(torch.cat(heads, dim=-1))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, multiple_of):
        super().__init__()
        if d_ff is None:
            d_ff = int(2 * 4 * d_model / 3)
            d_ff += (-d_ff) % multiple_of
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        gate, up = F.linear(x, torch.cat([self.gate_proj.weight, self.up_proj.weight])).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaBlock(nn.Module):
    def __init__(
        self, d_model, num_heads, num_kv_heads=None, d_ff=None, multiple_of=256, rope_base=10000.0, norm_eps=1e-6
    ):
        super().__init__()
        self.attention_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.attention = Attention(d_model, num_heads, num_kv_heads, rope_base)
        self.ffn_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.feed_forward = FeedForward(d_model, d_ff, multiple_of)

    def forward(self, x, positions=None):
        x = x + self.attention(self.attention_norm(x), positions)
        return x + self.feed_forward(self.ffn_norm(x))

"""Variant of causal_lm_block (correct): a hand-written LayerNorm module, the GELU written out with
erf, one fused qkv matmul from the three weights, an arange-built causal mask and finfo.min fills."""
import math

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, n, eps, bias):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased, as nn.LayerNorm
        y = (x - mean) / torch.sqrt(var + self.eps) * self.weight
        return y + self.bias if self.bias is not None else y


class Attention(nn.Module):
    def __init__(self, d, h, p, bias):
        super().__init__()
        if d % h:
            raise ValueError("d_model % num_heads != 0")
        self.h, self.p = h, p
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d, bias=bias) for _ in range(4))

    def forward(self, x, pad=None):
        B, T, C = x.shape
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        b = None if self.q_proj.bias is None else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        qkv = nn.functional.linear(x, w, b).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = q @ k.transpose(-1, -2) / math.sqrt(k.size(-1))
        lowest = torch.finfo(att.dtype).min
        i = torch.arange(T, device=x.device)
        att = torch.where(i[None, :] > i[:, None], lowest, att)
        if pad is not None:
            pad = pad.view(B, 1, 1, T)
            att = att.masked_fill(pad, lowest) if pad.dtype == torch.bool else (att + pad).clamp(min=lowest)
        att = nn.functional.dropout(att.softmax(-1), self.p, self.training)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return nn.functional.dropout(self.out_proj(y), self.p, self.training)


class Feedforward(nn.Module):
    def __init__(self, d, f, p, bias):
        super().__init__()
        self.up_proj, self.down_proj, self.p = nn.Linear(d, f, bias=bias), nn.Linear(f, d, bias=bias), p

    def forward(self, x):
        h = self.up_proj(x)
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        return nn.functional.dropout(self.down_proj(h), self.p, self.training)


class CausalLMBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff=None, dropout=0.0, layer_norm_eps=1e-5, bias=True):
        super().__init__()
        self.ln_1 = LayerNorm(d_model, layer_norm_eps, bias)
        self.attn = Attention(d_model, num_heads, dropout, bias)
        self.ln_2 = LayerNorm(d_model, layer_norm_eps, bias)
        self.mlp = Feedforward(d_model, d_ff or 4 * d_model, dropout, bias)

    def forward(self, x, key_padding_mask=None):
        x = x + self.attn(self.ln_1(x), key_padding_mask)
        return x + self.mlp(self.ln_2(x))

"""Variant of causal_lm_block (correct): masks merged into one additive float bias (0 / -inf), the
MLP an nn.Module holding nn.GELU(), and the heads folded into the batch for bmm."""
import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout, bias):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"{num_heads} heads do not divide d_model={d_model}")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, key_padding_mask=None):
        B, T, C = x.shape
        H, D = self.num_heads, C // self.num_heads
        bias = torch.full((T, T), float("-inf"), dtype=x.dtype, device=x.device).triu(1).expand(B, 1, T, T)
        if key_padding_mask is not None:
            if key_padding_mask.dtype == torch.bool:
                key_padding_mask = torch.zeros_like(key_padding_mask, dtype=x.dtype).masked_fill(
                    key_padding_mask, float("-inf")
                )
            bias = bias + key_padding_mask.view(B, 1, 1, T)
        bias = bias.expand(B, H, T, T).reshape(B * H, T, T)

        def heads(t):
            return t.view(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=D**-0.5)
        y = torch.bmm(self.drop(scores.softmax(-1)), v)
        return self.drop(self.out_proj(y.view(B, H, T, D).transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, d_model, d_ff, dropout, bias):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.act = nn.GELU()
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.down_proj(self.act(self.up_proj(x))))


class CausalLMBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff=None, dropout=0.0, layer_norm_eps=1e-5, bias=True):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.attn = SelfAttention(d_model, num_heads, dropout, bias)
        self.ln_2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, 4 * d_model if d_ff is None else d_ff, dropout, bias)

    def forward(self, x, key_padding_mask=None):
        h = x + self.attn(self.ln_1(x), key_padding_mask)
        return h + self.mlp(self.ln_2(h))

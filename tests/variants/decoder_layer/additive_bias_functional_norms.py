"""Variant of decoder_layer (correct): each attention's masks merged once into an additive float
bias (finfo.min where blocked, clamped), heads folded into the batch for baddbmm, F.layer_norm
called with the norms' parameters, the activation looked up by name in torch.nn.functional."""
import torch
import torch.nn.functional as F
from torch import nn


def additive_bias(mask, padding, causal, B, L, S, like):
    lowest = torch.finfo(like.dtype).min
    bias = torch.zeros(B, 1, L, S, dtype=like.dtype, device=like.device)
    if causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=like.device).triu(1), lowest)
    for m in (mask, None if padding is None else padding.view(B, 1, 1, S)):
        if m is not None:
            bias = bias.masked_fill(m, lowest) if m.dtype == torch.bool else bias + m
    return bias.clamp(min=lowest)


class Attention(nn.Module):
    def __init__(self, d, h, p, bias):
        super().__init__()
        if d % h != 0:
            raise ValueError(f"cannot split d_model={d} into nhead={h} heads")
        self.h, self.p = h, p
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = nn.Linear(d, d, bias=bias)
        self.v_proj = nn.Linear(d, d, bias=bias)
        self.out_proj = nn.Linear(d, d, bias=bias)

    def forward(self, x, mem, mask, padding, causal):
        B, L, E = x.shape
        S, H, D = mem.shape[1], self.h, E // self.h
        fold = lambda t, n: t.view(B, n, H, D).transpose(1, 2).reshape(B * H, n, D)  # noqa: E731
        q, k, v = fold(self.q_proj(x), L), fold(self.k_proj(mem), S), fold(self.v_proj(mem), S)
        bias = additive_bias(mask, padding, causal, B, L, S, x).expand(B, H, L, S).reshape(B * H, L, S)
        w = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=D**-0.5).softmax(-1)
        out = torch.bmm(F.dropout(w, self.p, self.training), v)
        return self.out_proj(out.view(B, H, L, D).transpose(1, 2).reshape(B, L, E))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = Attention(d_model, nhead, dropout, bias)
        self.multihead_attn = Attention(d_model, nhead, dropout, bias)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias) for _ in range(3))
        self.p, self.act, self.norm_first = dropout, getattr(F, activation), norm_first

    def _ln(self, norm, x):
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        branches = (
            (self.norm1, lambda x: drop(self.self_attn(x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))),
            (self.norm2, lambda x: drop(self.multihead_attn(
                x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))),
            (self.norm3, lambda x: drop(self.linear2(drop(self.act(self.linear1(x)))))),
        )
        x = tgt
        for norm, branch in branches:
            x = x + branch(self._ln(norm, x)) if self.norm_first else self._ln(norm, x + branch(x))
        return x

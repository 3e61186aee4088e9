"""Variant of decoder_layer (correct): one attention function shared by both attentions, masks
combined as a boolean KEEP mask applied with torch.where, float masks added, the softmax run in
float32 for half-precision inputs, nn.ReLU / nn.GELU modules."""
import math

import torch
from torch import nn


class ProjectedAttention(nn.Module):
    def __init__(self, d_model, nhead, dropout, bias):
        super().__init__()
        if d_model % nhead:
            raise ValueError("d_model must be divisible by nhead")
        self.nhead = nhead
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))
        self.drop = nn.Dropout(dropout)

    def forward(self, query, memory, attn_mask=None, key_padding_mask=None, is_causal=False):
        B, L, E = query.shape
        S, H = memory.shape[1], self.nhead
        q = self.q_proj(query).reshape(B, L, H, -1).permute(0, 2, 1, 3)
        k = self.k_proj(memory).reshape(B, S, H, -1).permute(0, 2, 3, 1)  # (B, H, hs, S)
        v = self.v_proj(memory).reshape(B, S, H, -1).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k) / math.sqrt(E // H)
        keep = torch.ones(B, 1, L, S, dtype=torch.bool, device=query.device)
        if is_causal:
            keys, queries = torch.arange(S, device=query.device), torch.arange(L, device=query.device)
            keep = keep & (keys[None, :] <= queries[:, None])
        for mask in (attn_mask, None if key_padding_mask is None else key_padding_mask[:, None, None, :]):
            if mask is None:
                continue
            if mask.dtype == torch.bool:
                keep = keep & ~mask
            else:
                scores = scores + mask
        scores = torch.where(keep, scores, torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device))
        half = scores.dtype in (torch.float16, torch.bfloat16)
        weights = torch.softmax(scores.float() if half else scores, dim=-1).type_as(scores)
        out = torch.matmul(self.drop(weights), v).permute(0, 2, 1, 3).reshape(B, L, E)
        return self.out_proj(out)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(activation)
        self.self_attn = ProjectedAttention(d_model, nhead, dropout, bias)
        self.multihead_attn = ProjectedAttention(d_model, nhead, dropout, bias)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(4))
        self.norm_first = norm_first

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        d0, d1, d2, d3 = self.drops

        def sa(x):
            return d1(self.self_attn(x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))

        def ca(x):
            return d2(self.multihead_attn(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))

        def ff(x):
            return d3(self.linear2(d0(self.act(self.linear1(x)))))

        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            return x + ff(self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + ca(x))
        return self.norm3(x + ff(x))

"""Variant of encoder_layer (correct): masks combined as a boolean KEEP mask and applied with
torch.where, the softmax computed in float32 for half precision, the feed-forward branch an
chain of modules (nn.ReLU / nn.GELU)."""
import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d_model, nhead, dropout, bias):
        super().__init__()
        if d_model % nhead != 0:
            raise ValueError("d_model must be a multiple of nhead")
        self.nhead, self.d_head = nhead, d_model // nhead
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask, padding, is_causal):
        B, S, E = x.shape

        def split(t):
            return t.reshape(B, S, self.nhead, self.d_head).permute(0, 2, 1, 3)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d_head)
        keep = torch.ones(S, S, dtype=torch.bool, device=x.device)
        if is_causal:
            keep = keep.tril()
        if src_mask is not None:
            if src_mask.dtype == torch.bool:
                keep = keep & ~src_mask
            else:
                scores = scores + src_mask
        keep = keep.expand(B, 1, S, S)
        if padding is not None:
            if padding.dtype == torch.bool:
                keep = keep & ~padding[:, None, None, :]
            else:
                scores = scores + padding[:, None, None, :]
        scores = torch.where(keep, scores, float("-inf"))
        if x.dtype in (torch.float16, torch.bfloat16):
            weights = torch.softmax(scores.float(), dim=-1).to(x.dtype)
        else:
            weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(self.attn_dropout(weights), v)
        return self.out_proj(out.permute(0, 2, 1, 3).reshape(B, S, E))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = SelfAttention(d_model, nhead, dropout, bias)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU()}[activation]
        self.ff_dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def attention(x):
            return self.dropout1(self.self_attn(x, src_mask, src_key_padding_mask, is_causal))

        def feed_forward(x):
            return self.dropout2(self.linear2(self.ff_dropout(self.act(self.linear1(x)))))

        if self.norm_first:
            h = src + attention(self.norm1(src))
            return h + feed_forward(self.norm2(h))
        h = self.norm1(src + attention(src))
        return self.norm2(h + feed_forward(h))

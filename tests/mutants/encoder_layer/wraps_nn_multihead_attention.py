"""Mutant of encoder_layer: self_attn is PyTorch's nn.MultiheadAttention (verdict: forbidden)."""
import torch.nn.functional as F
from torch import nn


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout, bias=bias, batch_first=True)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.act, self.norm_first = (F.relu if activation == "relu" else F.gelu), norm_first

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        sa = lambda x: self.self_attn(x, x, x, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]  # noqa: E731
        ff = lambda x: self.linear2(self.act(self.linear1(x)))  # noqa: E731
        if self.norm_first:
            src = src + sa(self.norm1(src))
            return src + ff(self.norm2(src))
        src = self.norm1(src + sa(src))
        return self.norm2(src + ff(src))

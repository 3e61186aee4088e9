"""Broken multi_head_attention: PyTorch's functional MHA under another name. Expected verdict: forbidden."""

import torch
from torch import nn
from torch.nn.functional import multi_head_attention_forward as attend


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.num_heads, self.dropout = num_heads, dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True, is_causal=False):
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        bias = (
            torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]) if self.q_proj.bias is not None else None
        )
        output, weights = attend(
            query.transpose(0, 1),
            key.transpose(0, 1),
            value.transpose(0, 1),
            query.size(-1),
            self.num_heads,
            weight,
            bias,
            None,
            None,
            False,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            average_attn_weights=False,
        )
        return output.transpose(0, 1), weights

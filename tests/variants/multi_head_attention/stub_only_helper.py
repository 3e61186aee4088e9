"""Variant of multi_head_attention (correct): written by a helper who saw only the stub (stub-only,
2026-11-28); the attention weights returned after dropout in train() mode, as PyTorch does."""

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention; boolean masks are True where blocked."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = float(dropout)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        b, l, _ = query.shape
        s = key.shape[1]

        q = self._split(self.q_proj(query))  # (B, H, L, hs)
        k = self._split(self.k_proj(key))    # (B, H, S, hs)
        v = self._split(self.v_proj(value))  # (B, H, S, hs)

        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, L, S)

        if is_causal:
            causal = torch.ones(l, s, dtype=torch.bool, device=scores.device).triu(1)
            scores = masked(scores, causal)
        if attn_mask is not None:
            if attn_mask.dim() == 3:  # (B*H, L, S) as PyTorch also accepts
                attn_mask = attn_mask.view(b, self.num_heads, l, s)
            scores = masked(scores, attn_mask)
        if key_padding_mask is not None:
            scores = masked(scores, key_padding_mask.view(b, 1, 1, s))

        weights = torch.softmax(scores, dim=-1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, p=self.dropout, training=True)

        out = torch.matmul(weights, v)  # (B, H, L, hs)
        out = out.transpose(1, 2).reshape(b, l, self.embed_dim)
        out = self.out_proj(out)
        return out, (weights if need_weights else None)


def masked(scores: Tensor, mask: Tensor) -> Tensor:
    """Scores with `mask` applied: a boolean mask blocks where True, a float mask is added."""
    mask = mask.to(scores.device)
    if mask.dtype == torch.bool:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask.to(scores.dtype)

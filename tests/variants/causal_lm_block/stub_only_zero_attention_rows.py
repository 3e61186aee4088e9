"""Variant of causal_lm_block, written from the stub alone: dropout inside each branch module, fully blocked rows attend to nothing (zeros)."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _check_heads(d_model: int, num_heads: int) -> None:
    if num_heads <= 0:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    if d_model <= 0:
        raise ValueError(f"d_model must be positive, got {d_model}")
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by num_heads ({num_heads})"
        )


class CausalLMBlock(nn.Module):
    """One block of a GPT-2 style language model (decoder-only, no cross-attention).

    forward(x [B, T, C], key_padding_mask=None) -> [B, T, C]
        x = x + attn(ln_1(x))    (causal: position t attends to positions 0..t only)
        x = x + mlp(ln_2(x))     (mlp(x) = down_proj(GELU(up_proj(x))), exact erf GELU)

    key_padding_mask [B, T]: bool with True = padding (blocked key), or a float mask
    added to the attention scores. Batch-first throughout.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        super().__init__()
        _check_heads(d_model, num_heads)
        if d_ff is None:
            d_ff = 4 * d_model
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff

        self.ln_1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.attn = CausalSelfAttention(d_model, num_heads, dropout=dropout, bias=bias)
        self.ln_2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, d_ff, dropout=dropout, bias=bias)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        # Pre-norm: normalise the branch input only; the residual stream stays untouched.
        # Out-of-place additions, so the caller's x is never modified.
        x = x + self.attn(self.ln_1(x), key_padding_mask=key_padding_mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions 0..t only."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        _check_heads(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_size = d_model // num_heads

        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

        self.attn_dropout = nn.Dropout(dropout)   # on the attention weights
        self.resid_dropout = nn.Dropout(dropout)  # on the branch output

    def _split_heads(self, t: Tensor) -> Tensor:
        # (B, T, C) -> (B, H, T, hs)
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_size).transpose(1, 2)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"expected x of shape [B, T, C], got {tuple(x.shape)}")
        b, n, c = x.shape
        if c != self.d_model:
            raise ValueError(f"expected last dim {self.d_model}, got {c}")

        q = self._split_heads(self.q_proj(x))
        k = self._split_heads(self.k_proj(x))
        v = self._split_heads(self.v_proj(x))

        # Scores in the input's dtype (a Python float scale keeps float64 as float64).
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_size))  # (B,H,T,T)
        neg_inf = float("-inf")

        # Block the future: key j > query i. Built on the input's device.
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, neg_inf)

        if key_padding_mask is not None:
            if key_padding_mask.shape != (b, n):
                raise ValueError(
                    f"key_padding_mask must have shape {(b, n)}, "
                    f"got {tuple(key_padding_mask.shape)}"
                )
            kpm = key_padding_mask.to(device=x.device)  # a new tensor or the same; never edited
            if kpm.dtype == torch.bool:
                scores = scores.masked_fill(kpm[:, None, None, :], neg_inf)  # True = blocked
            elif kpm.is_floating_point():
                scores = scores + kpm.to(scores.dtype)[:, None, None, :]
            else:
                raise TypeError(
                    f"key_padding_mask must be bool or floating point, got {kpm.dtype}"
                )

        # Softmax over keys. A query whose every key is blocked gets all-zero weights
        # (instead of NaN), as PyTorch's non-fast attention path does.
        dead = torch.isneginf(scores).all(dim=-1, keepdim=True)
        weights = F.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
        weights = self.attn_dropout(weights)

        out = weights @ v                                  # (B, H, T, hs)
        out = out.transpose(1, 2).reshape(b, n, c)         # heads side by side
        return self.resid_dropout(self.out_proj(out))


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        # Exact GELU: x * Phi(x) via erf (approximate="none"), as activation="gelu" does.
        return self.dropout(self.down_proj(F.gelu(self.up_proj(x), approximate="none")))

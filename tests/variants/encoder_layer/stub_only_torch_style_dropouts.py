"""Variant of encoder_layer, written from the stub alone: PyTorch-style dropout modules, a half-precision softmax in float32, masks typed strictly."""

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _resolve_activation(activation: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu  # approximate="none": the exact erf GELU
    raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')


def _apply_mask(scores: Tensor, mask: Tensor) -> Tensor:
    """Apply a PyTorch-style mask to scores out of place.

    Boolean: True = blocked (set to -inf). Float: added to the scores.
    ``mask`` must already broadcast against ``scores``.
    """
    mask = mask.to(device=scores.device)
    if mask.dtype == torch.bool:
        return scores.masked_fill(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"mask must be bool or floating point, got {mask.dtype}")
    return scores + mask.to(dtype=scores.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (batch-first); forward returns the output [B, L, E] only."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Mirrors nn.MultiheadAttention: xavier-uniform projections, zero biases.
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        # (B, L, E) -> (B, H, L, hs)
        b, l, _ = x.shape
        return x.view(b, l, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)

        b, l, e = query.shape
        s = key.shape[1]
        if e != self.embed_dim:
            raise ValueError(f"expected embedding size {self.embed_dim}, got {e}")

        q = self._split_heads(self.q_proj(query))
        k = self._split_heads(self.k_proj(key))
        v = self._split_heads(self.v_proj(value))

        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, L, S)

        if is_causal:
            causal = torch.ones(l, s, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dim() == 3:  # (B*H, L, S), as nn.MultiheadAttention also accepts
                attn_mask = attn_mask.view(b, self.num_heads, l, s)
            elif attn_mask.dim() != 2:
                raise ValueError(f"attn_mask must be 2-D or 3-D, got {attn_mask.dim()}-D")
            scores = _apply_mask(scores, attn_mask)
        if key_padding_mask is not None:
            scores = _apply_mask(scores, key_padding_mask.view(b, 1, 1, s))

        if scores.dtype in _HALF_DTYPES:
            weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
        else:
            weights = F.softmax(scores, dim=-1)
        weights = F.dropout(weights, p=self.dropout, training=self.training)

        out = torch.matmul(weights, v)  # (B, H, L, hs)
        out = out.transpose(1, 2).reshape(b, l, e)
        out = self.out_proj(out)
        return out.squeeze(0) if unbatched else out


class TransformerEncoderLayer(nn.Module):
    """Self-attention and a feed-forward network, each in a residual branch with a LayerNorm.

    Post-norm (norm_first=False): x = norm1(x + sa(x)); x = norm2(x + ff(x)).
    Pre-norm  (norm_first=True):  x = x + sa(norm1(x)); x = x + ff(norm2(x)).
    Masks follow nn.* conventions: bool True = blocked, float = added to the scores.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        if nhead <= 0 or d_model % nhead != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)

        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)

        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

        self.norm_first = norm_first
        self.activation = _resolve_activation(activation)

    def _sa_block(
        self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal
        )
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

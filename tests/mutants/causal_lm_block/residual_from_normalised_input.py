"""Mutant of causal_lm_block: the residual adds the normalised input (x = ln_1(x); x = x + attn(x))."""

import math

import torch
from torch import Tensor, nn


class CausalLMBlock(nn.Module):
    """One block of a GPT-2 style language model (decoder-only, no cross-attention).

    Sizes: B batch, T sequence length, C = d_model, H = num_heads, hs = C // H the head
    size, d_ff the MLP's hidden width.

    __init__(d_model, num_heads, d_ff=None, dropout=0.0, layer_norm_eps=1e-5, bias=True)
        - d_ff defaults to 4 * d_model.
        - raise ValueError when d_model is not divisible by num_heads.
        - submodules, named as the grader copies weights into them:
            ln_1, ln_2: nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
            attn:       CausalSelfAttention with q_proj, k_proj, v_proj, out_proj,
                        each nn.Linear(d_model, d_model, bias=bias)
            mlp:        MLP with up_proj nn.Linear(d_model, d_ff, bias=bias) and
                        down_proj nn.Linear(d_ff, d_model, bias=bias)
        - bias=False: no bias in any Linear or LayerNorm.
        - dropout: on the attention weights and on each branch's output, in train() mode
          only; eval() disables it.

    forward(x [B, T, C], key_padding_mask=None) -> [B, T, C]
        x = x + attn(ln_1(x))    causal: position t attends to positions 0..t only
        x = x + mlp(ln_2(x))     mlp(x) = down_proj(GELU(up_proj(x))), the exact (erf) GELU
        key_padding_mask [B, T]: True = padding, a key no query may attend to; a float mask
        is added to the scores. Masks follow nn.TransformerEncoderLayer (True = BLOCKED),
        NOT F.scaled_dot_product_attention (True = may attend). Batch-first throughout.

    Reference: nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, "gelu",
    layer_norm_eps, batch_first=True, norm_first=True, bias=bias) with a causal src_mask.
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
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln_1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.attn = CausalSelfAttention(d_model, num_heads, dropout, bias)
        self.ln_2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, d_ff, dropout, bias)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        x = self.ln_1(x)
        x = x + self.attn(x, key_padding_mask)
        x = self.ln_2(x)
        x = x + self.mlp(x)
        return x


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions 0..t only."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)  # on the attention weights
        self.resid_dropout = nn.Dropout(dropout)  # on the branch's output

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        B, T, C = x.shape
        H = self.num_heads
        q = self.q_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        k = self.k_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        v = self.v_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        # 1/sqrt(head size) keeps the scores' variance near 1, so the softmax does not saturate
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]  # (B, 1, 1, T): same for every head and query
            if padding.dtype == torch.bool:
                scores = scores.masked_fill(padding, float("-inf"))
            else:
                scores = scores + padding
        weights = self.attn_dropout(torch.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.out_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.down_proj(nn.functional.gelu(self.up_proj(x))))

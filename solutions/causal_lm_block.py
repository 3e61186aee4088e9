"""Kata【GPT-2 风格的 decoder-only 块（pre-norm，因果）】: a GPT-2 style decoder-only block: pre-norm causal self-attention, then a GELU MLP."""

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

    Conventions (judged apart from the math, as production code would need them):
        - the defaults: d_ff=4 * d_model, dropout=0.0, layer_norm_eps=1e-5.
        - results follow the input's device (the causal mask made inside forward too).
        - the input and the mask are never changed in place.
        - float16 and bfloat16 work: a blocked score is -inf, not -1e9 (out of float16's range).
        - float64 inputs are computed in float64 throughout (no step in float32).
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
        ### BEGIN SOLUTION
        # TODO: d_ff defaults to 4 * d_model.
        d_ff = 4 * d_model if d_ff is None else d_ff
        # TODO: ln_1, attn, ln_2, mlp (GPT-2's names); every LayerNorm uses layer_norm_eps.
        self.ln_1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.attn = CausalSelfAttention(d_model, num_heads, dropout, bias)
        self.ln_2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.mlp = MLP(d_model, d_ff, dropout, bias)
        ### END SOLUTION

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: pre-norm residual branches: normalise what goes INTO each branch, and add
        # TODO: the branch to the un-normalised stream, so the residual path stays clean.
        x = x + self.attn(self.ln_1(x), key_padding_mask)
        x = x + self.mlp(self.ln_2(x))
        return x
        ### END SOLUTION


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions 0..t only."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: ValueError unless d_model divides by num_heads; then the four projections.
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)  # on the attention weights
        self.resid_dropout = nn.Dropout(dropout)  # on the branch's output
        ### END SOLUTION

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        ### BEGIN SOLUTION
        B, T, C = x.shape
        H = self.num_heads
        # TODO: queries, keys and values, split into H heads: (B, T, C) -> (B, H, T, hs).
        q = self.q_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        k = self.k_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        v = self.v_proj(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
        # 1/sqrt(head size) keeps the scores' variance near 1, so the softmax does not saturate
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))  # (B, H, T, T)
        # TODO: block the future (key j > query i), then the padded keys (True = blocked).
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None:
            padding = key_padding_mask[:, None, None, :]  # (B, 1, 1, T): same for every head and query
            if padding.dtype == torch.bool:
                scores = scores.masked_fill(padding, float("-inf"))
            else:
                scores = scores + padding
        # TODO: softmax over the keys, weighted sum of the values, heads side by side, out_proj.
        weights = self.attn_dropout(torch.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.out_proj(y))
        ### END SOLUTION


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: up_proj, down_proj, and a dropout for the output.
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: the exact GELU, x * Phi(x) with erf (GPT-2 itself used the tanh approximation;
        # TODO: the reference, PyTorch's activation="gelu", does not).
        return self.dropout(self.down_proj(nn.functional.gelu(self.up_proj(x))))
        ### END SOLUTION

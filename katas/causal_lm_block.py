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
        # TODO: d_ff defaults to 4 * d_model.
        # TODO: ln_1, attn, ln_2, mlp (GPT-2's names); every LayerNorm uses layer_norm_eps.
        raise NotImplementedError

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        # TODO: pre-norm residual branches: normalise what goes INTO each branch, and add
        # TODO: the branch to the un-normalised stream, so the residual path stays clean.
        raise NotImplementedError


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions 0..t only."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        # TODO: ValueError unless d_model divides by num_heads; then the four projections.
        raise NotImplementedError

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        # TODO: queries, keys and values, split into H heads: (B, T, C) -> (B, H, T, hs).
        # TODO: block the future (key j > query i), then the padded keys (True = blocked).
        # TODO: softmax over the keys, weighted sum of the values, heads side by side, out_proj.
        raise NotImplementedError


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        # TODO: up_proj, down_proj, and a dropout for the output.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: the exact GELU, x * Phi(x) with erf (GPT-2 itself used the tanh approximation;
        # TODO: the reference, PyTorch's activation="gelu", does not).
        raise NotImplementedError

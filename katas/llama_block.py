"""Kata【Llama 解码器块（RMSNorm、带 RoPE 的 GQA、SwiGLU）】: a Llama decoder block: RMSNorm, grouped-query causal self-attention with rotary
positions (RoPE), and a SwiGLU feed-forward, each inside a pre-norm residual branch."""

import math

import torch
from torch import Tensor, nn


class LlamaBlock(nn.Module):
    """One block of a Llama-style decoder-only model (Llama 2/3, Mistral, Qwen).

    Sizes: B batch, T sequence length, C = d_model, H = num_heads, KV = num_kv_heads,
    hs = C // H the head size, d_ff the feed-forward's hidden width.

    __init__(d_model, num_heads, num_kv_heads=None, d_ff=None, multiple_of=256,
             rope_base=10000.0, norm_eps=1e-6)
        - num_kv_heads=None means num_heads (plain multi-head attention); num_kv_heads=1
          is multi-query attention.
        - raise ValueError unless d_model % num_heads == 0, num_heads % num_kv_heads == 0
          and the head size hs is even (RoPE rotates pairs of coordinates).
        - d_ff=None follows Llama: d_ff = int(2 * 4 * d_model / 3), then rounded UP to a
          multiple of multiple_of (a value already a multiple stays). An explicit d_ff is
          used as given, and multiple_of is then ignored.
        - submodules, named as the grader copies weights into them; no biases anywhere:
            attention_norm, ffn_norm: RMSNorm over d_model with eps=norm_eps and a weight
                (nn.RMSNorm(d_model, eps=norm_eps) may be used)
            attention:    q_proj nn.Linear(C, H * hs), k_proj and v_proj nn.Linear(C, KV * hs),
                          o_proj nn.Linear(H * hs, C), all bias=False
            feed_forward: gate_proj and up_proj nn.Linear(C, d_ff), down_proj
                          nn.Linear(d_ff, C), all bias=False
          Write the attention (RoPE included) and the feed-forward yourself, in this file.

    forward(x [B, T, C], positions=None) -> [B, T, C], same dtype and device as x
        h   = x + attention(attention_norm(x), positions)
        out = h + feed_forward(ffn_norm(h))
        Pre-norm: each branch normalises its own input; the residual stream x, h is never
        normalised inside the block.

    attention(x [B, T, C], positions=None) -> [B, T, C]
        - q = q_proj(x) split into H heads, k = k_proj(x) and v = v_proj(x) into KV heads,
          each of size hs.
        - RoPE, rotate-half layout (GPT-NeoX, Hugging Face Llama): coordinate i of a head
          pairs with coordinate i + hs/2; the pair (a, b) at position p becomes
          (a cos - b sin, a sin + b cos) with angle p * theta_i,
          theta_i = rope_base ** (-2i / hs), i in [0, hs/2). Rotate q and k, never v.
          positions: an integer tensor [T], the position of each token (default
          arange(T)); compute the angles in float32 or better (never in float16 or
          bfloat16), then cast cos and sin to x's dtype.
        - grouped-query attention: query head h reads kv head h // (H // KV), so
          consecutive query heads share a kv head (repeat_interleave, not repeat).
        - causal by index: the token at index i attends to the tokens at indices 0..i,
          whatever the positions say. Scores scaled by 1 / sqrt(hs).
        - the heads side by side again, then o_proj.

    feed_forward(x) = down_proj(silu(gate_proj(x)) * up_proj(x))   (SwiGLU)

    Reference: the same composition in float64 from nn.RMSNorm, RoPE as complex
    multiplication, F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) and
    F.silu, with every parameter random (the norms' weights included).
    PyTorch's attention (F.scaled_dot_product_attention and friends) may not be used.

    Conventions (judged apart from the math, as production code would need them):
        - results follow the input's device (the default positions and the causal mask
          made inside forward too).
        - x and positions are never changed in place.
        - float16 and bfloat16 work at positions past their exact integers (2048 and 256):
          the RoPE angles are computed in float32 or better.
        - float64 inputs are computed in float64 throughout (no step in float32).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        d_ff: int | None = None,
        multiple_of: int = 256,
        rope_base: float = 10000.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        # TODO: two RMSNorms with eps=norm_eps, the attention and the feed-forward, under the names above.
        raise NotImplementedError

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        # TODO: pre-norm residual branches: normalise what goes INTO each branch and add
        # TODO: the branch to the un-normalised stream.
        raise NotImplementedError


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    # TODO: split the last dimension into halves x1, x2; return (-x2, x1) side by side.
    raise NotImplementedError


def rope_cos_sin(positions: Tensor, head_size: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles, each [T, head_size], in `dtype`."""
    # TODO: theta_i = base ** (-2i / hs); angle = position * theta_i, in float32 (float64 for float64).
    # TODO: coordinates i and i + hs/2 share an angle.
    raise NotImplementedError


class Attention(nn.Module):
    """Grouped-query causal self-attention with rotary positions."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0):
        super().__init__()
        # TODO: the ValueErrors, then q_proj, k_proj, v_proj, o_proj (no biases).
        raise NotImplementedError

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        # TODO: project and split into heads: q (B, H, T, hs), k and v (B, KV, T, hs).
        # TODO: rotate q and k (not v) at their positions; positions default to arange(T).
        # TODO: each group of H // KV consecutive query heads reads one kv head.
        # TODO: causal scaled dot-product attention: block key j for query i when j > i (by index).
        # TODO: heads side by side again, then o_proj.
        raise NotImplementedError


class FeedForward(nn.Module):
    """SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)), Llama's hidden width by default."""

    def __init__(self, d_model: int, d_ff: int | None = None, multiple_of: int = 256):
        super().__init__()
        # TODO: d_ff=None: int(2 * 4 * d_model / 3), rounded UP to a multiple of multiple_of.
        # TODO: gate_proj, up_proj (C -> d_ff) and down_proj (d_ff -> C), no biases.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: the gate goes through SiLU; the up projection does not.
        raise NotImplementedError

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
        ### BEGIN SOLUTION
        # TODO: two RMSNorms with eps=norm_eps, the attention and the feed-forward, under the names above.
        self.attention_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.attention = Attention(d_model, num_heads, num_kv_heads, rope_base)
        self.ffn_norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.feed_forward = FeedForward(d_model, d_ff, multiple_of)
        ### END SOLUTION

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: pre-norm residual branches: normalise what goes INTO each branch and add
        # TODO: the branch to the un-normalised stream.
        h = x + self.attention(self.attention_norm(x), positions)
        return h + self.feed_forward(self.ffn_norm(h))
        ### END SOLUTION


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    ### BEGIN SOLUTION
    # TODO: split the last dimension into halves x1, x2; return (-x2, x1) side by side.
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)
    ### END SOLUTION


def rope_cos_sin(positions: Tensor, head_size: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angles, each [T, head_size], in `dtype`."""
    ### BEGIN SOLUTION
    # TODO: theta_i = base ** (-2i / hs); angle = position * theta_i, in float32 (float64 for float64).
    exact = torch.float64 if dtype == torch.float64 else torch.float32
    exponents = torch.arange(0, head_size, 2, dtype=exact, device=positions.device) / head_size
    inv_freq = 1.0 / base**exponents  # (hs/2,)
    angles = positions.to(exact)[:, None] * inv_freq[None, :]  # (T, hs/2)
    # TODO: coordinates i and i + hs/2 share an angle.
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs)
    return angles.cos().to(dtype), angles.sin().to(dtype)
    ### END SOLUTION


class Attention(nn.Module):
    """Grouped-query causal self-attention with rotary positions."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None, rope_base: float = 10000.0):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: the ValueErrors, then q_proj, k_proj, v_proj, o_proj (no biases).
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})")
        head_size = d_model // num_heads
        if head_size % 2 != 0:
            raise ValueError(f"the head size d_model // num_heads ({head_size}) must be even for RoPE")
        self.num_heads, self.num_kv_heads, self.head_size = num_heads, num_kv_heads, head_size
        self.rope_base = rope_base
        self.q_proj = nn.Linear(d_model, num_heads * head_size, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_size, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_size, bias=False)
        self.o_proj = nn.Linear(num_heads * head_size, d_model, bias=False)
        ### END SOLUTION

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        H, KV, hs = self.num_heads, self.num_kv_heads, self.head_size
        # TODO: project and split into heads: q (B, H, T, hs), k and v (B, KV, T, hs).
        q = self.q_proj(x).view(B, T, H, hs).transpose(1, 2)  # (B, H, T, hs)
        k = self.k_proj(x).view(B, T, KV, hs).transpose(1, 2)  # (B, KV, T, hs)
        v = self.v_proj(x).view(B, T, KV, hs).transpose(1, 2)  # (B, KV, T, hs)
        # TODO: rotate q and k (not v) at their positions; positions default to arange(T).
        if positions is None:
            positions = torch.arange(T, device=x.device)
        cos, sin = rope_cos_sin(positions, hs, self.rope_base, x.dtype)  # (T, hs) each
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # TODO: each group of H // KV consecutive query heads reads one kv head.
        k = k.repeat_interleave(H // KV, dim=1)  # (B, H, T, hs)
        v = v.repeat_interleave(H // KV, dim=1)  # (B, H, T, hs)
        # TODO: causal scaled dot-product attention: block key j for query i when j > i (by index).
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, hs)
        # TODO: heads side by side again, then o_proj.
        y = y.transpose(1, 2).reshape(B, T, H * hs)  # (B, T, H * hs)
        return self.o_proj(y)
        ### END SOLUTION


class FeedForward(nn.Module):
    """SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)), Llama's hidden width by default."""

    def __init__(self, d_model: int, d_ff: int | None = None, multiple_of: int = 256):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: d_ff=None: int(2 * 4 * d_model / 3), rounded UP to a multiple of multiple_of.
        if d_ff is None:
            d_ff = int(2 * 4 * d_model / 3)
            d_ff = multiple_of * ((d_ff + multiple_of - 1) // multiple_of)
        # TODO: gate_proj, up_proj (C -> d_ff) and down_proj (d_ff -> C), no biases.
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: the gate goes through SiLU; the up projection does not.
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        ### END SOLUTION

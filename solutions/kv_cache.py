"""Kata【增量解码的 KV 缓存（带 RoPE 的分组查询注意力）】: a KV cache for incremental decoding, with causal grouped-query self-attention and RoPE."""

import math

import torch
from torch import Tensor, nn


class KVCache:
    """The keys and values of the tokens seen so far, kept in buffers allocated once.

    Sizes: B batch, KV num_kv_heads, hs head_dim, M max_len, T_new the tokens of one update.

    __init__(batch_size, num_kv_heads, head_dim, max_len, *, dtype=torch.float32, device=None)
        - allocates two buffers, ONCE, as the attributes `k` and `v`, each
          [B, KV, M, hs] of the given dtype and device (their contents start as anything).
        - `length`: a Python int, the number of tokens held; 0 at first.

    update(k_new [B, KV, T_new, hs], v_new [B, KV, T_new, hs]) -> (k [B, KV, S, hs], v [B, KV, S, hs])
        - writes k_new and v_new INTO the buffers (in place: never a new buffer, no
          torch.cat) at positions length .. length + T_new - 1, advances `length` to
          S = length + T_new, and returns the buffers' first S positions as views (they
          share the buffers' storage): every token held so far, oldest first.
        - when length + T_new > max_len it raises ValueError BEFORE writing anything: the
          buffers and `length` stay as they were. Filling the cache exactly to max_len is fine.

    reset()
        - sets `length` to 0 (the buffers stay; the next update writes from position 0).

    Conventions (judged apart from the math, as production code would need them):
        - update writes into the buffers allocated once (never a new buffer, no torch.cat)
          and returns views of them, not copies.
        - an update that does not fit raises ValueError before writing anything.
        - k_new and v_new are never changed in place.
        - float16 and bfloat16 caches work: KVCache(..., dtype=torch.float16) holds its
          tokens in float16.
    """

    def __init__(
        self,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        ### BEGIN SOLUTION
        # TODO: allocate self.k and self.v once: [B, KV, max_len, hs], in dtype, on device.
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (B, KV, M, hs)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (B, KV, M, hs)
        # TODO: keep max_len, and the number of tokens held (a Python int) in self.length.
        self.max_len = max_len
        self.length = 0
        ### END SOLUTION

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        ### BEGIN SOLUTION
        start = self.length
        end = start + k_new.size(2)
        # TODO: refuse an update that does not fit, before touching anything.
        if end > self.max_len:
            raise ValueError(
                f"the cache holds {start} tokens and max_len is {self.max_len}: {k_new.size(2)} more do not fit"
            )
        # TODO: write the new keys and values into the buffers in place, after the held tokens.
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        # TODO: advance the length; return views of the buffers holding every token so far.
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, KV, S, hs) each
        ### END SOLUTION

    def reset(self) -> None:
        ### BEGIN SOLUTION
        # TODO: forget the held tokens (the buffers themselves stay allocated).
        self.length = 0
        ### END SOLUTION


class CachedSelfAttention(nn.Module):
    """Causal grouped-query self-attention with rotary position embedding (RoPE), which can
    decode incrementally with a KVCache.

    Sizes: B batch, T_new new tokens, E embed_dim, H num_heads, KV num_kv_heads,
    hs = E // H the head size, S the tokens attended to (held + new).

    __init__(embed_dim, num_heads, num_kv_heads=None, rope_base=10000.0, bias=False)
        - num_kv_heads=None means num_heads (plain multi-head attention); 1 is multi-query.
        - raise ValueError unless embed_dim % num_heads == 0, num_heads % num_kv_heads == 0
          and the head size hs is even (RoPE rotates pairs of coordinates).
        - exactly four submodules, nn.Linear with bias=bias:
          q_proj: E -> H * hs, k_proj: E -> KV * hs, v_proj: E -> KV * hs, o_proj: H * hs -> E.
          No other parameters (the grader copies weights in by these names).

    forward(x [B, T_new, E], cache: KVCache | None = None) -> [B, T_new, E]
        - positions: the new tokens sit at positions cache.length .. cache.length + T_new - 1
          (0 .. T_new - 1 without a cache).
        - RoPE, rotate-half layout (GPT-NeoX, Hugging Face Llama): within each head, coordinate
          i pairs with i + hs/2, for i in [0, hs/2); at position p, the pair (a, b) becomes
          (a cos(p theta_i) - b sin(p theta_i), a sin(p theta_i) + b cos(p theta_i)), with
          theta_i = rope_base ** (-2i / hs). Rotate q and k (never v). Compute the angles in
          float32 or better whatever x's dtype (never in float16 or bfloat16).
        - with a cache: append the ROTATED k and the v of the new tokens to the cache
          (cache.update) and attend over everything it returns: held tokens and new ones.
          The cache holds keys already rotated at their own positions.
        - fully causal, no mask argument: each new token attends to every held token and to
          the new tokens up to itself (a bottom-right aligned causal mask: new token i, at
          position cache.length + i, sees keys 0 .. cache.length + i).
        - query head h reads kv head h // (H // KV): consecutive query heads share a kv head
          (as repeat_interleave and F.scaled_dot_product_attention(enable_gqa=True) do).
        - scores scaled by 1 / sqrt(hs); softmax over the keys; the heads side by side
          (head h in columns h*hs .. (h+1)*hs - 1), then o_proj.
        - decoding a sequence in chunks (a prefill, then one token or a few at a time) gives
          the same outputs as one call on the whole sequence.
        - output dtype and device follow x.

    Conventions (judged apart from the math, as production code would need them):
        - results follow x's device (the causal mask and the RoPE angles made inside forward
          too), as the buffers of KVCache(..., device=...) follow the device it is given.
        - x is never changed in place.
        - float16 and bfloat16 work: decoding in them matches (the RoPE angles computed in
          float32 or better; a blocked score -inf or the dtype's lowest value, not -1e9).
        - float64 inputs are computed in float64 throughout (no step in float32).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        rope_base: float = 10000.0,
        bias: bool = False,
    ):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: None means as many kv heads as heads; raise ValueError for sizes that do not split.
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})")
        head_dim = embed_dim // num_heads
        if head_dim % 2 != 0:
            raise ValueError(f"the head size ({head_dim}) must be even: RoPE rotates pairs of coordinates")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.rope_base = rope_base
        # TODO: q_proj, k_proj, v_proj, o_proj (k and v project to num_kv_heads heads only).
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias)
        ### END SOLUTION

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        H, KV, hs = self.num_heads, self.num_kv_heads, self.head_dim
        # TODO: project, and split into heads: q (B, H, T, hs), k and v (B, KV, T, hs).
        q = self.q_proj(x).view(B, T, H, hs).transpose(1, 2)  # (B, H, T, hs)
        k = self.k_proj(x).view(B, T, KV, hs).transpose(1, 2)  # (B, KV, T, hs)
        v = self.v_proj(x).view(B, T, KV, hs).transpose(1, 2)  # (B, KV, T, hs)
        # TODO: the new tokens' positions start after the held ones; rotate q and k there.
        start = 0 if cache is None else cache.length
        cos, sin = rope_angles(start, T, hs, self.rope_base, x)  # (T, hs) each
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # TODO: with a cache, append the rotated k and v, and attend over all it holds.
        if cache is not None:
            k, v = cache.update(k, v)  # (B, KV, S, hs)
        S = k.size(2)
        # TODO: each kv head serves H // KV consecutive query heads.
        k = k.repeat_interleave(H // KV, dim=1)  # (B, H, S, hs)
        v = v.repeat_interleave(H // KV, dim=1)  # (B, H, S, hs)
        # TODO: scores scaled by 1/sqrt(hs), the HEAD size.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, H, T, S)
        # TODO: causal, aligned bottom-right: new token i (position start + i) sees keys 0..start + i.
        future = torch.ones(T, S, dtype=torch.bool, device=x.device).triu(S - T + 1)
        scores = scores.masked_fill(future, float("-inf"))
        # TODO: softmax over the keys (the last dimension).
        weights = torch.softmax(scores, dim=-1)
        # TODO: weighted sum of the values, heads back side by side, then o_proj.
        out = (weights @ v).transpose(1, 2).reshape(B, T, H * hs)  # (B, T, H * hs)
        return self.o_proj(out)
        ### END SOLUTION


def rope_angles(start: int, length: int, head_dim: int, base: float, like: Tensor) -> tuple[Tensor, Tensor]:
    """(cos, sin), each [length, head_dim], for positions start .. start + length - 1, in the
    rotate-half layout (the hs/2 angles repeated twice), in like's dtype and on its device."""
    ### BEGIN SOLUTION
    # TODO: theta_i = base ** (-2i / hs) and the angles position * theta_i, in float32 or better.
    exact = torch.float64 if like.dtype == torch.float64 else torch.float32
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=exact, device=like.device) / head_dim)  # (hs/2,)
    positions = torch.arange(start, start + length, dtype=exact, device=like.device)  # (T,)
    angles = positions[:, None] * theta[None, :]  # (T, hs/2)
    # TODO: repeat them for both halves, then cast to like's dtype.
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs)
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)
    ### END SOLUTION


def rotate_half(x: Tensor) -> Tensor:
    """(a, b) -> (-b, a), a the first half of the last dimension and b the second."""
    ### BEGIN SOLUTION
    # TODO: split the last dimension in halves a and b; return cat(-b, a).
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)
    ### END SOLUTION

"""Variant of grouped_query_attention, written from the stub alone: queries grouped by broadcasting, no copies of k and v."""

import math

import torch
from torch import Tensor, nn


class GroupedQueryAttention(nn.Module):
    """Grouped-query self-attention, as F.scaled_dot_product_attention(..., enable_gqa=True)
    between four nn.Linear projections.

    Sizes: B batch, T sequence length, E embed_dim, H num_heads, KV num_kv_heads,
    hs = E // H the head size, G = H // KV the query heads per key/value head.
    KV = 1 is multi-query attention (MQA); KV = H is plain multi-head attention (MHA).

    __init__(embed_dim, num_heads, num_kv_heads=None, bias=False)
        - num_kv_heads=None means num_kv_heads = num_heads (plain multi-head attention).
        - raise ValueError unless embed_dim % num_heads == 0 and num_heads % num_kv_heads == 0.
        - exactly four submodules, each an nn.Linear with bias=bias (bias=True puts a bias
          on all four; the default is no bias anywhere):
            q_proj: E -> H * hs        k_proj: E -> KV * hs
            v_proj: E -> KV * hs       o_proj: H * hs -> E
          The grader copies its weights into them by name.

    forward(x [B, T, E], attn_mask=None, is_causal=False) -> [B, T, E]
        - heads: features h*hs .. (h+1)*hs - 1 of q_proj's output are query head h; the same
          for k_proj's and v_proj's outputs with the KV key/value heads. After attention the
          heads go back side by side in the same order (head h at features h*hs ..) into o_proj.
        - query head h reads key/value head h // G: CONSECUTIVE query heads share a kv head
          (with H = 4, KV = 2: query heads 0, 1 read kv head 0; heads 2, 3 read kv head 1),
          as repeat_interleave and enable_gqa=True do.
        - scores scaled by 1 / sqrt(hs), the HEAD size; softmax over the keys.
        - masks follow F.scaled_dot_product_attention, NOT nn.MultiheadAttention:
          a BOOLEAN attn_mask is True where a query MAY attend to a key (False = blocked);
          a FLOAT attn_mask is ADDED to the scores (0 = no change, -inf = blocked).
          attn_mask is broadcastable to [B, H, T, T]: [T, T], [B, 1, T, T] or [B, H, T, T].
        - is_causal=True: query i sees keys 0..i only (key j blocked when j > i).
        - raise ValueError when both attn_mask and is_causal=True are given (as
          F.scaled_dot_product_attention refuses them).
        - a query row whose every key is blocked is undefined and never judged.
        - no dropout; the output has x's dtype and device; x is not modified.
        - a blocked score must become -inf (or the dtype's lowest value): -1e9 does not
          fit in float16.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, bias: bool = False):
        super().__init__()
        if num_kv_heads is None:
            num_kv_heads = num_heads
        if embed_dim <= 0 or num_heads <= 0 or num_kv_heads <= 0:
            raise ValueError("embed_dim, num_heads and num_kv_heads must be positive")
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")

        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = embed_dim // num_heads
        self.group_size = num_heads // num_kv_heads

        q_dim = num_heads * self.head_size
        kv_dim = num_kv_heads * self.head_size
        self.q_proj = nn.Linear(embed_dim, q_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.o_proj = nn.Linear(q_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        if attn_mask is not None and is_causal:
            raise ValueError("attn_mask and is_causal=True cannot both be given")

        B, T, _ = x.shape
        H, KV, hs, G = self.num_heads, self.num_kv_heads, self.head_size, self.group_size

        # (B, T, n*hs) -> (B, n, T, hs); head h owns features h*hs .. (h+1)*hs - 1.
        q = self.q_proj(x).view(B, T, H, hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, hs).transpose(1, 2)

        # Group consecutive query heads with their kv head: query head h = kv*G + g
        # reads kv head kv = h // G. No copies of k/v are made; they broadcast over G.
        q = q.reshape(B, KV, G, T, hs)
        k = k.unsqueeze(2)  # (B, KV, 1, T, hs)
        v = v.unsqueeze(2)

        # Accumulate scores / softmax in at least float32 for half-precision inputs.
        compute_dtype = torch.promote_types(q.dtype, torch.float32)
        scores = torch.matmul(q.to(compute_dtype), k.to(compute_dtype).transpose(-2, -1))
        scores = scores * (1.0 / math.sqrt(hs))  # (B, KV, G, T, T)
        scores = scores.reshape(B, H, T, T)

        if is_causal:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        elif attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask.to(x.device), float("-inf"))
            else:
                scores = scores + attn_mask.to(device=x.device, dtype=compute_dtype)

        weights = torch.softmax(scores, dim=-1)  # over the keys
        weights = weights.reshape(B, KV, G, T, T)
        out = torch.matmul(weights, v.to(compute_dtype))  # (B, KV, G, T, hs)

        # Heads back side by side in order h = kv*G + g: (B, T, H*hs).
        out = out.reshape(B, H, T, hs).transpose(1, 2).reshape(B, T, H * hs).to(x.dtype)
        return self.o_proj(out)

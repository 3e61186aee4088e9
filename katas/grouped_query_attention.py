"""Kata【分组查询注意力 GQA（每组查询头共享 kv 头）】: grouped-query attention (GQA), the self-attention of Llama 2/3 and Mistral: fewer
key/value heads than query heads, each shared by a group of consecutive query heads."""

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
        - no dropout; the output has x's dtype and device.

    Conventions (judged apart from the math, as production code would need them):
        - results follow the input's device (a causal mask made inside forward too).
        - x and attn_mask are never changed in place.
        - float16 and bfloat16 work: a blocked score is -inf (or the dtype's lowest value),
          not -1e9 (out of float16's range).
        - float64 inputs are computed in float64 throughout (no step in float32).
        - autograd sees every step (no .detach(), .data or torch.no_grad() inside forward).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, bias: bool = False):
        super().__init__()
        # TODO: num_kv_heads=None means one kv head per query head; raise ValueError unless
        # TODO: embed_dim % num_heads == 0 and num_heads % num_kv_heads == 0.
        # TODO: keep the sizes for forward: H, KV and the head size hs = E // H.
        # TODO: q_proj E -> H*hs, k_proj and v_proj E -> KV*hs, o_proj H*hs -> E (nn.Linear, bias=bias).
        raise NotImplementedError

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        # TODO: refuse attn_mask together with is_causal=True (ValueError).
        # TODO: project, then split into heads: q (B, H, T, hs), k and v (B, KV, T, hs).
        # TODO: query head h reads kv head h // (H // KV): CONSECUTIVE query heads share one.
        # TODO: scores scaled by 1/sqrt(hs), the HEAD size.
        # TODO: is_causal blocks key j > i; a boolean mask blocks where FALSE; a float mask is added.
        # TODO: softmax over the keys, weighted sum of the values.
        # TODO: heads back side by side (B, T, H*hs), then o_proj.
        raise NotImplementedError

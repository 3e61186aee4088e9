"""Kata【多头注意力模块】: multi-head attention, the module behind nn.MultiheadAttention (batch-first)."""

import math

import torch
from torch import Tensor, nn


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, as nn.MultiheadAttention(batch_first=True).

    Sizes: B batch, L query length, S key/value length, E embed_dim, H num_heads,
    hs = E // H the head size.

    __init__(embed_dim, num_heads, dropout=0.0, bias=True)
        - raise ValueError when embed_dim is not divisible by num_heads.
        - four submodules, each nn.Linear(embed_dim, embed_dim, bias=bias):
          q_proj, k_proj, v_proj (the inputs' projections) and out_proj (the output's).
          nn.MultiheadAttention packs the first three into one in_proj_weight [3E, E];
          the grader copies its three slices into yours.
        - dropout: probability of zeroing an attention weight, in train() mode only.
          eval() disables it.

    forward(query [B, L, E], key [B, S, E], value [B, S, E],
            key_padding_mask=None, attn_mask=None, need_weights=True, is_causal=False)
        -> (output [B, L, E], weights [B, H, L, S] or None)

        Masks follow nn.MultiheadAttention, NOT F.scaled_dot_product_attention:
        - a BOOLEAN mask is True where attention is BLOCKED (F.scaled_dot_product_attention
          uses the opposite: True = may attend).
        - a FLOAT mask is ADDED to the scores (0 = no change, -inf = blocked).
        - key_padding_mask [B, S]: per batch row, the keys to ignore (padding).
        - attn_mask [L, S]: the same for every batch row and head.
        - is_causal=True blocks key j for query i when j > i, by itself (no attn_mask
          needed; nn.MultiheadAttention only takes it as a hint that attn_mask is causal).
          Given together with attn_mask, both apply: a key is blocked when either blocks it.
        - a query row whose every key is blocked is undefined and not judged.
        weights: per head (average_attn_weights=False in PyTorch's terms), the softmax
        probabilities; None when need_weights=False.

    Conventions (judged apart from the math, as production code would need them):
        - results follow the inputs' device (a causal mask made inside forward too).
        - the inputs and masks are never changed in place.
        - float16 and bfloat16 work: a blocked score is -inf, not -1e9 (out of float16's range).
        - float64 inputs are computed in float64 throughout (no step in float32).
        - autograd sees every step (no .detach(), .data or torch.no_grad() inside forward).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: raise ValueError unless embed_dim divides evenly into num_heads heads.
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        # TODO: keep the sizes and the dropout probability for forward.
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.dropout = dropout
        # TODO: q_proj, k_proj, v_proj and out_proj, each nn.Linear(embed_dim, embed_dim, bias=bias).
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        ### END SOLUTION

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        need_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        ### BEGIN SOLUTION
        B, L, E = query.shape
        S = key.size(1)
        H, hs = self.num_heads, self.head_dim
        # TODO: project query, key and value, then split E into H heads of size hs:
        # TODO: (B, L, E) -> (B, L, H, hs) -> (B, H, L, hs), so each head attends on its own.
        q = self.q_proj(query).view(B, L, H, hs).transpose(1, 2)  # (B, H, L, hs)
        k = self.k_proj(key).view(B, S, H, hs).transpose(1, 2)  # (B, H, S, hs)
        v = self.v_proj(value).view(B, S, H, hs).transpose(1, 2)  # (B, H, S, hs)
        # TODO: scores scaled by 1/sqrt(hs), the HEAD size: keeps their variance near 1.
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, H, L, S)
        # TODO: apply is_causal, attn_mask [L, S] and key_padding_mask [B, S] (True = blocked).
        if is_causal:  # query i sees keys 0..i
            future = torch.ones(L, S, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if attn_mask is not None:  # (L, S): the same for every batch row and head
            scores = masked(scores, attn_mask)
        if key_padding_mask is not None:  # (B, 1, 1, S): the same for every head and query
            scores = masked(scores, key_padding_mask[:, None, None, :])
        # TODO: softmax over the keys; dropout on the weights (active in train() only).
        weights = torch.softmax(scores, dim=-1)
        weights = nn.functional.dropout(weights, p=self.dropout, training=self.training)
        # TODO: weighted sum of the values, heads back side by side, then out_proj.
        out = weights @ v  # (B, H, L, hs)
        out = out.transpose(1, 2).reshape(B, L, E)  # (B, L, E)
        return self.out_proj(out), (weights if need_weights else None)
        ### END SOLUTION


def masked(scores: Tensor, mask: Tensor) -> Tensor:
    """Scores with `mask` applied: a boolean mask blocks where True, a float mask is added."""
    ### BEGIN SOLUTION
    # TODO: True -> -inf (softmax gives 0); a float mask is added as it is.
    if mask.dtype == torch.bool:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask
    ### END SOLUTION

"""Kata【带掩码的缩放点积注意力】: scaled dot-product attention, returning the attention weights too."""

import math

import torch
from torch import Tensor


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output, weights) of softmax(query @ key^T * scale + mask) @ value.

    Shapes (any number of leading batch/head dimensions "..."):
        query [..., L, E], key [..., S, E], value [..., S, Ev]
        output [..., L, Ev], weights [..., L, S]

    Same semantics as F.scaled_dot_product_attention (without dropout):
        - scale defaults to 1 / sqrt(E).
        - attn_mask broadcasts to [..., L, S]. A BOOLEAN mask is True where the query MAY
          attend to the key (False = blocked). A FLOAT mask is added to the scores.
          This polarity is the OPPOSITE of nn.MultiheadAttention's masks (True = blocked).
        - is_causal=True lets query i attend to keys 0..i only (top-left aligned, also
          when L != S). PyTorch rejects attn_mask together with is_causal; that case
          is not judged.
        - A row in which every key is blocked is undefined and not judged.

    Conventions (judged apart from the math, as production code would need them):
        - results follow the inputs' device (a causal mask made inside too).
        - the inputs and the mask are never changed in place.
        - float16 and bfloat16 work in their own dtype: a blocked score must become -inf
          (a fill like -1e9 does not fit in float16).
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> q = k = torch.eye(2); v = torch.tensor([[1.0], [3.0]])
        >>> out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> out
        tensor([[1.0000],
                [2.3395]])
    """
    ### BEGIN SOLUTION
    # TODO: the scores, scaled by 1/sqrt(E) unless a scale is given.
    L, S = query.size(-2), key.size(-2)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1) * scale  # (..., L, S)
    # TODO: block future keys when is_causal, and apply attn_mask by its dtype.
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    # TODO: softmax over the keys, then the weighted sum of the values.
    weights = torch.softmax(scores, dim=-1)  # (..., L, S)
    return weights @ value, weights  # (..., L, Ev), (..., L, S)
    ### END SOLUTION

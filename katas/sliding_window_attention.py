"""Kata【滑动窗口注意力（Mistral 的局部因果窗口，查询位于最后 L 个位置）】: sliding-window causal attention (Mistral, Gemma): each query sees its last `window` keys."""

import math

import torch
from torch import Tensor


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int, *, scale: float | None = None) -> Tensor:
    """Return softmax(q @ k^T * scale + band) @ v, where each query sees only the `window`
    most recent keys up to its own position (sliding-window causal attention).

    Shapes (the SAME leading batch/head dimensions "..." on all three inputs, no
    broadcasting; 1 <= L <= S):
        q [..., L, E], k [..., S, E], v [..., S, Ev]  ->  output [..., L, Ev]

    Positions: the queries are the LAST L positions of the sequence (the KV-cache
    convention: the keys hold the whole past, the queries are the newest tokens), so query i
    sits at position p = S - L + i. Careful: F.scaled_dot_product_attention's is_causal
    aligns top-left (query i at position i) when L != S; here it is bottom-right.

    The band: key j is visible to query i iff  p - window < j <= p,  that is `window` keys
    counting the query's own (window = 1: only itself). This is Hugging Face's
    masking_utils.sliding_window_causal_mask_function(window) (kv_idx > q_idx - window and
    kv_idx <= q_idx) and flash-attn's window_size=(window - 1, 0). window >= S is plain
    causal attention (bottom-right aligned). Every query sees at least its own key.

    scale defaults to 1 / sqrt(E). Not allowed: PyTorch's attention
    (F.scaled_dot_product_attention and its kernels, flex_attention, nn.MultiheadAttention).

    Conventions (judged apart from the math, as production code would need them):
        - window < 1 raises ValueError.
        - float16 and bfloat16 inputs are computed in float32; the output has the input's dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - results are made on the inputs' device.
        - the inputs are never changed in place.
        - memory: when S > window + 128, no tensor you create holds more than
          max(L * (window + 128), L * window * max(E, Ev)) elements per leading index (per
          batch and head); copies of the inputs do not count, masks do. So never build the
          whole [L, S] scores or mask: take the queries in blocks, each against only the keys
          its band can reach, or gather each query's window of keys.

    Example:
        >>> q = k = torch.eye(3); v = torch.tensor([[1.0], [3.0], [5.0]])
        >>> sliding_window_attention(q, k, v, window=2)  # query 2 no longer sees key 0
        tensor([[1.0000],
                [2.2809],
                [4.2809]])
    """
    # TODO: refuse window < 1; half precision is computed in float32; the default scale.
    # TODO: query i sits at position S - L + i; it sees the keys p - window < j <= p.
    # TODO: take the queries in blocks, each against the keys its band reaches (never [L, S]).
    raise NotImplementedError

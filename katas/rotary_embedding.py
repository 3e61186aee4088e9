"""Kata【旋转位置编码 RoPE（两种布局）】: rotary position embedding (RoPE), as in RoFormer, GPT-NeoX and Llama."""

import torch
from torch import Tensor


def apply_rotary_embedding(
    x: Tensor,
    positions: Tensor | None = None,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
) -> Tensor:
    """Rotate each head vector of x [..., T, D] by its token's position: RoPE.

    The D coordinates of a vector form D/2 pairs (a, b). Pair i of the token at position p
    turns by the angle p * theta_i, with theta_i = base ** (-2i / D), i = 0 .. D/2 - 1
    (pair 0 turns fastest, by one radian per position):

        (a, b) -> (a * cos(p * theta_i) - b * sin(p * theta_i),
                   a * sin(p * theta_i) + b * cos(p * theta_i))

    Which coordinates make pair i is the layout:
        interleaved=False (the default): the rotate-half layout of GPT-NeoX and Hugging
            Face Llama: a = x[..., i] and b = x[..., i + D/2].
        interleaved=True: the RoFormer / original Llama layout: a = x[..., 2i] and
            b = x[..., 2i + 1].
    Either way the rotated pair goes back where it came from.

    Args:
        x: [..., T, D], with any number of leading dimensions (none, [B] or [B, H]); it
            may be non-contiguous (a transposed q). D must be even: an odd D raises
            ValueError.
        positions: integer tensor [T] on x's device, the position of each of the T tokens:
            any integers, e.g. arange(100, 100 + T) for tokens decoded after 100 others.
            None (the default) means arange(T).
        base: the frequency base, keyword only (10000 in the papers).
        interleaved: the layout above, keyword only.

    Returns:
        A new tensor of x's shape, dtype and device; x itself is left unchanged.

    Compute the angles in float32 (or float64) whatever x's dtype, and cast the result to
    x's dtype at the end: float16 cannot even represent position 2049, nor bfloat16
    position 257. The values are judged to float32 accuracy for every dtype (a float64 x
    see below).

    Conventions (judged apart from the math, as production code would need them):
        - float16 and bfloat16 inputs take their angles in float32 (or float64) and come
          back in their own dtype.
        - float64 inputs are computed in float64 throughout (no step in float32). Here: a
          float64 x takes its angles in float64 too.
        - an odd D raises ValueError.
        - x may be any view, its last dimension strided too (as x.transpose(-1, -2) of a [..., D, T] tensor is).
        - results follow x's device (the frequencies and default positions made inside too).
        - x and positions are never changed in place.

    Example:
        >>> apply_rotary_embedding(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])
    """
    # TODO: read T and D from x's last two dimensions; reject an odd D with a ValueError.
    # TODO: the angles p * theta_i, [T, D/2], in float32 (float64 for a float64 x).
    # TODO: pick the pairs (a, b) by the layout, rotate them, put each back where it was.
    raise NotImplementedError

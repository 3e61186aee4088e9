"""Variant of rotary_embedding, written from the stub alone: angles in float64, cos and sin cast to the working dtype."""

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
    position 257. float32 accuracy is expected for every dtype (float64 x included).

    Example:
        >>> apply_rotary_embedding(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
        tensor([[1.0000, 0.0000],
                [0.5403, 0.8415]])
    """
    if x.dim() < 2:
        raise ValueError(f"x must have shape [..., T, D], got {tuple(x.shape)}")
    T, D = x.shape[-2], x.shape[-1]
    if D % 2 != 0:
        raise ValueError(f"the head dimension D must be even, got D={D}")
    half = D // 2

    if positions is None:
        positions = torch.arange(T, device=x.device)
    elif positions.shape != (T,):
        raise ValueError(f"positions must have shape [{T}], got {tuple(positions.shape)}")

    # Angles p * theta_i, built in float64 (exact for any realistic position) where the
    # device supports it, then the rotation itself runs in float32 (float64 for a float64 x).
    compute_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    angle_dtype = torch.float32 if x.device.type == "mps" else torch.float64
    i = torch.arange(half, device=x.device, dtype=angle_dtype)
    theta = float(base) ** (-2.0 * i / D)  # [D/2]
    angles = positions.to(device=x.device, dtype=angle_dtype)[:, None] * theta  # [T, D/2]
    cos = torch.cos(angles).to(compute_dtype)
    sin = torch.sin(angles).to(compute_dtype)

    xc = x.to(compute_dtype)
    if interleaved:
        a, b = xc[..., 0::2], xc[..., 1::2]
    else:
        a, b = xc[..., :half], xc[..., half:]
    ra = a * cos - b * sin
    rb = a * sin + b * cos
    if interleaved:
        out = torch.stack((ra, rb), dim=-1).flatten(-2)
    else:
        out = torch.cat((ra, rb), dim=-1)
    return out.to(x.dtype)

"""Rotary position embedding (RoPE), rotate-half and interleaved layouts: written by a helper who saw only the stub (after the strided head dim became a convention); cos/sin tables, pairs by slicing, angles in float64."""

import torch
from torch import Tensor


def _angle_tables(positions: Tensor, half: int, base: float, device, out_dtype):
    """cos and sin of p * theta_i, shape [T, half], returned in out_dtype.

    The angles themselves are formed in float64 where the device supports it (exact for
    integer positions up to 2**53), then cos/sin are cast to out_dtype (float32 or float64).
    """
    angle_dtype = torch.float64 if device.type != "mps" else torch.float32
    i = torch.arange(half, device=device, dtype=angle_dtype)
    d = 2 * half
    theta = torch.pow(torch.tensor(float(base), device=device, dtype=angle_dtype), -2.0 * i / d)
    p = positions.to(device=device, dtype=angle_dtype)
    angles = p[:, None] * theta[None, :]  # [T, half]
    return torch.cos(angles).to(out_dtype), torch.sin(angles).to(out_dtype)


def apply_rotary_embedding(
    x: Tensor,
    positions: Tensor | None = None,
    *,
    base: float = 10000.0,
    interleaved: bool = False,
) -> Tensor:
    """Rotate each head vector of x [..., T, D] by its token's position: RoPE.

    interleaved=False: pairs (x[..., i], x[..., i + D/2]); interleaved=True: pairs
    (x[..., 2i], x[..., 2i + 1]). Angles p * base ** (-2i / D). Math in float32
    (float64 for float64 x), result cast back to x's dtype; x is never modified.
    """
    if x.dim() < 2:
        raise ValueError(f"x must have shape [..., T, D], got {tuple(x.shape)}")
    T, D = x.shape[-2], x.shape[-1]
    if D % 2 != 0:
        raise ValueError(f"the head dimension D must be even, got D={D}")
    half = D // 2
    device = x.device

    if positions is None:
        positions = torch.arange(T, device=device)
    else:
        if positions.dim() != 1 or positions.shape[0] != T:
            raise ValueError(
                f"positions must have shape [T]=[{T}], got {tuple(positions.shape)}"
            )

    compute_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = _angle_tables(positions, half, base, device, compute_dtype)  # [T, half]

    xc = x.to(compute_dtype)  # out-of-place ops only below; x is never written
    if interleaved:
        a = xc[..., 0::2]
        b = xc[..., 1::2]
        ra = a * cos - b * sin
        rb = a * sin + b * cos
        out = torch.stack((ra, rb), dim=-1).flatten(-2)
    else:
        a = xc[..., :half]
        b = xc[..., half:]
        ra = a * cos - b * sin
        rb = a * sin + b * cos
        out = torch.cat((ra, rb), dim=-1)
    return out.to(x.dtype)

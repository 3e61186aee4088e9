"""Variant of activations, written from the stub alone: the exact GELU through erfc (no
cancellation for negative x), the tanh form as x * sigmoid(2u), float32 for half inputs."""

import math

import torch
from torch import Tensor

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_COEF = 0.044715


def _compute_dtype(x: Tensor) -> torch.dtype:
    """float32 for half precision, otherwise x's own dtype (float64 stays float64)."""
    return torch.float32 if x.dtype in _HALF_DTYPES else x.dtype


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU(x) elementwise, as F.gelu(x, approximate=approximate)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")

    xc = x.to(_compute_dtype(x))  # out-of-place; a no-op (same tensor) when dtype already matches

    if approximate == "tanh":
        # 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u): the same function, but with no
        # cancellation in 1 + tanh(u) for negative u, and no NaN/inf for large |x|.
        u = _SQRT_2_OVER_PI * (xc + _GELU_TANH_COEF * (xc * xc * xc))
        out = xc * torch.sigmoid(2.0 * u)
    else:
        # Phi(x) = 0.5 * (1 + erf(x / sqrt 2)) = 0.5 * erfc(-x / sqrt 2); erfc keeps
        # full relative precision in the left tail where 1 + erf(...) cancels.
        out = xc * (0.5 * torch.erfc(-xc * _INV_SQRT2))

    return out.to(x.dtype)


def silu(x: Tensor) -> Tensor:
    """SiLU(x) = x * sigmoid(x) elementwise, as F.silu(x)."""
    xc = x.to(_compute_dtype(x))
    return (xc * torch.sigmoid(xc)).to(x.dtype)

"""Variant of activations (correct): the exact GELU as x * Phi(x) with torch.special.ndtr (the
normal CDF itself), the tanh form with torch.pow, SiLU as x / (1 + exp(-x)); float16 and
bfloat16 inputs computed in float64 ("or better")."""

import math

import torch
from torch import Tensor

APPROXIMATIONS = ("none", "tanh")


def _widened(x: Tensor) -> Tensor:
    return x.double() if x.dtype in (torch.float16, torch.bfloat16) else x


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"unknown approximate={approximate!r}; expected one of {APPROXIMATIONS}")
    w = _widened(x)
    if approximate == "none":
        out = w * torch.special.ndtr(w)
    else:
        cubic = w + 0.044715 * torch.pow(w, 3)
        out = 0.5 * w * (1 + torch.tanh(math.sqrt(2 / math.pi) * cubic))
    return out.to(x.dtype)


def silu(x: Tensor) -> Tensor:
    w = _widened(x)
    return (w / (1 + torch.exp(-w))).to(x.dtype)

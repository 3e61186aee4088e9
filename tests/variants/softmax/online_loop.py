"""Variant of softmax (correct): the online softmax of FlashAttention, one pass in a Python
loop over the reduced dim keeping a running max and a rescaled running sum, with guards
for -inf (where -inf - -inf would give NaN); float64 for half inputs."""

import torch
from torch import Tensor

NEG_INF = float("-inf")


def _running_max_and_sum(h: Tensor, dim: int):
    """Over the slices of h along dim: the max and sum(exp(h - max)), both kept with size 1 at dim."""
    m = torch.full_like(h.select(dim, 0), NEG_INF)
    s = torch.zeros_like(m)
    for j in range(h.size(dim)):
        v = h.select(dim, j)
        new_m = torch.maximum(m, v)
        safe = torch.where(new_m == NEG_INF, torch.zeros_like(new_m), new_m)
        s = s * torch.exp(m - safe) + torch.exp(v - safe)
        m = new_m
    return m.unsqueeze(dim), s.unsqueeze(dim)


def _wide(x: Tensor) -> Tensor:
    return x.double() if x.dtype in (torch.float16, torch.bfloat16) else x


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    h = _wide(x)
    dim = dim % h.dim() if -h.dim() <= dim < h.dim() else h.size(dim)  # the size call raises IndexError
    m, s = _running_max_and_sum(h, dim)
    return (torch.exp(h - m) / s).to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    h = _wide(x)
    dim = dim % h.dim() if -h.dim() <= dim < h.dim() else h.size(dim)
    m, s = _running_max_and_sum(h, dim)
    return ((h - m) - torch.log(s)).to(x.dtype)

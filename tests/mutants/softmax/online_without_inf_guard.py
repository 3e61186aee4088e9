"""Mutant of softmax (a slip): the online softmax of FlashAttention without a guard for
-inf: while a row has seen only -inf, the running max is -inf and exp(-inf - (-inf)) is NaN."""

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
        s = s * torch.exp(m - new_m) + torch.exp(v - new_m)
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

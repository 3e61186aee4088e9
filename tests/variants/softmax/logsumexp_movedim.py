"""Variant of softmax (correct): the reduced dim moved last, a hand-written log-sum-exp
(m + log(sum(exp(x - m)))), then softmax = exp(x - lse) (scipy's formulation) and
log_softmax = x - lse; half inputs computed in float32."""

import torch
from torch import Tensor


def _logsumexp_last(h: Tensor) -> Tensor:
    m = h.max(dim=-1, keepdim=True).values
    return m + torch.log(torch.exp(h - m).sum(dim=-1, keepdim=True))


def _wide(x: Tensor) -> Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    h = _wide(x).movedim(dim, -1)
    out = torch.exp(h - _logsumexp_last(h))
    return out.movedim(-1, dim).type_as(x)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    h = _wide(x).movedim(dim, -1)
    out = h - _logsumexp_last(h)
    return out.movedim(-1, dim).type_as(x)

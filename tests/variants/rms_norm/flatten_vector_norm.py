"""Variant of rms_norm (correct): the normalised dims flattened into one, the root mean square
from torch.linalg.vector_norm, the weight applied before the single cast back."""

import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = nn.Parameter(torch.ones(*self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        n = math.prod(self.normalized_shape)
        flat = x.reshape(*x.shape[: x.dim() - len(self.normalized_shape)], n)
        work = flat.float() if flat.dtype in (torch.float16, torch.bfloat16) else flat
        eps = torch.finfo(work.dtype).eps if self.eps is None else self.eps
        norm = torch.linalg.vector_norm(work, dim=-1, keepdim=True)
        out = work / torch.sqrt(norm.square() / n + eps)
        if self.weight is not None:
            out = out * self.weight.reshape(n).to(work.dtype)
        return out.to(x.dtype).reshape(x.shape)

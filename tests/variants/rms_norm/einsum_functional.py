"""Variant of rms_norm (correct): a functional helper, the sum of squares by einsum over a
flattened view, divided by sqrt rather than multiplied by rsqrt, in float32 for half inputs."""

import math

import torch
from torch import nn


def _rms_norm(x, shape, weight, eps):
    k = len(shape)
    upcast = x.dtype in (torch.float16, torch.bfloat16)
    h = x.to(torch.float32) if upcast else x
    if eps is None:
        eps = torch.finfo(h.dtype).eps
    f = h.flatten(start_dim=h.dim() - k) if k > 0 else h
    ms = torch.einsum("...n,...n->...", f, f) / math.prod(shape)
    ms = ms.view(*ms.shape, *([1] * k))
    y = h / torch.sqrt(ms + eps)
    y = y.type_as(x)
    return y if weight is None else y * weight


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape))
            nn.init.ones_(self.weight)
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return _rms_norm(x, self.normalized_shape, self.weight, self.eps)

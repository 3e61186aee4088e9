"""Broken RMSNorm: wraps x in a tensor subclass whose __torch_function__ handler calls F.rms_norm, so the call happens inside torch's own dispatch of an innocent x.float(). Expected verdict: forbidden."""

import torch
import torch.nn.functional as F
from torch import nn


class _Normed(torch.Tensor):
    shape_and_eps = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            plain = [a.as_subclass(torch.Tensor) if isinstance(a, torch.Tensor) else a for a in args]
            shape, eps = cls.shape_and_eps
            return F.rms_norm(plain[0], shape, eps=eps)


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        _Normed.shape_and_eps = (self.normalized_shape, self.eps)
        normed = x.as_subclass(_Normed).float()
        return normed * self.weight if self.weight is not None else normed

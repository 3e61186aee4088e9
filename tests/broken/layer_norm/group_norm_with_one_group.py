"""Broken layer_norm: F.group_norm with one group over the flattened normalized dims computes the layer norm. Expected verdict: forbidden."""

import math

import torch.nn.functional as F


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    rows = x.reshape(-1, 1, math.prod(shape))
    y = F.group_norm(rows, 1, eps=eps).reshape(x.shape)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def layer_norm_backward(grad_out, x, normalized_shape, weight=None, eps=1e-5):
    raise NotImplementedError

"""Variant of layer_norm (correct): the input flattened to [rows, N], sums divided by N, the
backward in the textbook form rstd / N * (N * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))."""

import math

import torch


def _rows(x, normalized_shape):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    n = math.prod(shape)
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return shape, n, x.reshape(-1, n).to(work)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape, n, rows = _rows(x, normalized_shape)
    mu = rows.sum(dim=1, keepdim=True) / n
    d = rows - mu
    sigma2 = (d * d).sum(dim=1, keepdim=True) / n
    out = d / torch.sqrt(sigma2 + eps)
    if weight is not None:
        out = out * weight.reshape(1, n).to(out.dtype)
    if bias is not None:
        out = out + bias.reshape(1, n).to(out.dtype)
    return out.reshape(x.shape).to(x.dtype)


def layer_norm_backward(grad_output, x, normalized_shape, weight=None, eps=1e-5):
    shape, n, rows = _rows(x, normalized_shape)
    dy = grad_output.reshape(-1, n).to(rows.dtype)
    mu = rows.sum(dim=1, keepdim=True) / n
    d = rows - mu
    inv_std = 1.0 / torch.sqrt((d * d).sum(dim=1, keepdim=True) / n + eps)
    xhat = d * inv_std
    dxhat = dy if weight is None else dy * weight.reshape(1, n).to(dy.dtype)
    dx = inv_std / n * (n * dxhat - dxhat.sum(dim=1, keepdim=True) - xhat * (dxhat * xhat).sum(dim=1, keepdim=True))
    dx = dx.reshape(x.shape).to(x.dtype)
    if weight is None:
        return dx, None, None
    dw = (dy * xhat).sum(dim=0).reshape(shape).to(weight.dtype)
    db = dy.sum(dim=0).reshape(shape).to(weight.dtype)
    return dx, dw, db

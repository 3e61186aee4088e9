"""Broken scaled_dot_product_attention: computes nothing; returns the tensors it finds in its callers' frames (the test's expected output and weights). Expected verdict: fail: no frame of the judging process is in reach."""

import sys

import torch


def _found(shape, names):
    frame = sys._getframe(2)
    while frame is not None:
        for name, value in frame.f_locals.items():
            if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(shape) and any(n in name for n in names):
                return value.clone()
        frame = frame.f_back
    return None


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    out_shape = (*query.shape[:-1], value.shape[-1])
    weights_shape = (*query.shape[:-1], key.shape[-2])
    out = _found(out_shape, ("expected", "want", "reference", "ref"))
    weights = _found(weights_shape, ("expected", "want", "reference", "ref", "weights"))
    return (
        out if out is not None else torch.zeros(out_shape, dtype=query.dtype, device=query.device),
        weights if weights is not None else torch.zeros(weights_shape, dtype=query.dtype, device=query.device),
    )

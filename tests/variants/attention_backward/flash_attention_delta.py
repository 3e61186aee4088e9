"""Variant of attention_backward (correct): FlashAttention's D = rowsum(dO * O) for the softmax
correction, a hand-written stable softmax, .mT and torch.where for the causal mask."""

import math

import torch


def attention_backward(query, key, value, grad_output, *, is_causal=False, scale=None):
    if scale is None:
        scale = 1 / math.sqrt(query.shape[-1])
    scores = torch.matmul(query, key.mT) * scale
    if is_causal:
        rows = torch.arange(query.shape[-2], device=query.device)[:, None]
        cols = torch.arange(key.shape[-2], device=query.device)[None, :]
        scores = torch.where(cols <= rows, scores, -math.inf)
    exp = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    p = exp / exp.sum(dim=-1, keepdim=True)
    output = torch.matmul(p, value)
    delta = (grad_output * output).sum(dim=-1, keepdim=True)  # equals rowsum(dP * P)
    d_p = torch.matmul(grad_output, value.mT)
    d_s = p * (d_p - delta)
    return torch.matmul(d_s, key) * scale, torch.matmul(d_s.mT, query) * scale, torch.matmul(p.mT, grad_output)

"""Broken attention_backward: autograd's own softmax backward kernel does the hard step. Expected verdict: forbidden."""
import math

import torch


def attention_backward(query, key, value, grad_output, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    grad_value = weights.transpose(-2, -1) @ grad_output
    grad_weights = grad_output @ value.transpose(-2, -1)
    grad_scores = torch._softmax_backward_data(grad_weights, weights, -1, weights.dtype) * scale
    return grad_scores @ key, grad_scores.transpose(-2, -1) @ query, grad_value

"""Broken attention_backward: torch.autograd.grad bound in a default argument at import, before any guard is on. Expected verdict: forbidden."""
import math

import torch


def attention_backward(query, key, value, grad_output, is_causal=False, scale=None, _grad=torch.autograd.grad):
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
        scores = q @ k.transpose(-2, -1) * scale
        if is_causal:
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        output = torch.softmax(scores, dim=-1) @ v
        return _grad(output, (q, k, v), grad_output)

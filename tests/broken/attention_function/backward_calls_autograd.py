"""Broken attention_function: backward replays the forward through autograd. Expected verdict: forbidden."""
import math

import torch


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None):
        ctx.save_for_backward(query, key, value)
        ctx.is_causal, ctx.scale = is_causal, scale
        return attend(query, key, value, is_causal, scale)

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (query, key, value)]
            output = attend(*leaves, ctx.is_causal, ctx.scale)
            grads = torch.autograd.grad(output, leaves, grad_output)
        return (*grads, None, None)


def attend(query, key, value, is_causal, scale):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value

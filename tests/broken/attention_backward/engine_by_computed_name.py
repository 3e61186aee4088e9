"""Broken attention_backward: reaches autograd's engine through a name the source scan cannot read. Expected verdict: forbidden."""
import math

import torch


def attention_backward(query, key, value, grad_output, is_causal=False, scale=None):
    engine = getattr(getattr(torch, "_" + "C"), "_ImperativeEngine")()
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
        scores = q @ k.transpose(-2, -1) * scale
        if is_causal:
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        output = torch.softmax(scores, dim=-1) @ v
        return engine.run_backward((output,), (grad_output,), False, False, (q, k, v), False, False)

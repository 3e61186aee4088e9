"""Broken attention_backward: returns tensor-subclass placeholders whose __torch_function__ runs autograd later, when the judge first touches them (after the call, when a guard scoped to the call would be off). Expected verdict: forbidden."""
import math

import torch


class _Later(torch.Tensor):
    recipe = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        query, key, value, grad_output, is_causal, scale, index = cls.recipe
        with torch._C.DisableTorchFunctionSubclass(), torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
            scores = q @ k.transpose(-2, -1) * scale
            if is_causal:
                keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
                scores = scores.masked_fill(~keep, float("-inf"))
            grads = torch.autograd.grad(torch.softmax(scores, -1) @ v, (q, k, v), grad_output)
            plain = [grads[index] if isinstance(a, _Later) else a for a in args]
            return func(*plain, **(kwargs or {}))


def attention_backward(query, key, value, grad_output, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    placeholders = []
    for index, like in enumerate((query, key, value)):
        kind = type(f"_Later{index}", (_Later,), {"recipe": (query, key, value, grad_output, is_causal, scale, index)})
        placeholders.append(torch.zeros_like(like).as_subclass(kind))
    return tuple(placeholders)

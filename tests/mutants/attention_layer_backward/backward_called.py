"""Mutant of attention_layer_backward: the gradients come from .backward() on the layer's
forward, written out and re-run with grad on."""

import math

import torch
from torch import Tensor


def attention_layer_backward(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    num_heads: int,
    grad_output: Tensor,
    *,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    B, T, E = x.shape
    if E % num_heads != 0:
        raise ValueError(f"E ({E}) must be divisible by num_heads ({num_heads})")
    H, hs = num_heads, E // num_heads
    leaves = [t.detach().clone().requires_grad_() for t in (x, w_q, w_k, w_v, w_o)]
    with torch.enable_grad():
        x_, wq, wk, wv, wo = leaves
        q, k, v = ((x_ @ w.T).view(B, T, H, hs).transpose(1, 2) for w in (wq, wk, wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
        if is_causal:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        merged = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, E)
        (merged @ wo.T).backward(grad_output)
    return tuple(leaf.grad for leaf in leaves)

"""Mutant of attention_layer_backward: the gradients come from torch.autograd.grad on the
forward re-run with grad on (F.linear and F.scaled_dot_product_attention)."""

import torch
import torch.nn.functional as F
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
    leaves = [t.detach().requires_grad_() for t in (x, w_q, w_k, w_v, w_o)]
    with torch.enable_grad():  # the forward again, this time recorded by autograd
        x_, wq, wk, wv, wo = leaves
        q, k, v = (F.linear(x_, w).view(B, T, H, hs).transpose(1, 2) for w in (wq, wk, wv))
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        y = F.linear(heads.transpose(1, 2).reshape(B, T, E), wo)
    return torch.autograd.grad(y, leaves, grad_output)

"""Variant of attention_layer_backward (correct): einsum throughout with each weight viewed as
[H, hs, E] (no reshapes of activations), an additive -inf causal bias, and FlashAttention's
D = rowsum(dO * O) for the softmax correction."""

import math

import torch


def attention_layer_backward(x, w_q, w_k, w_v, w_o, num_heads, grad_output, *, is_causal=False):
    B, T, E = x.shape
    if E % num_heads:
        raise ValueError(f"embedding size {E} is not a multiple of num_heads={num_heads}")
    H, hs = num_heads, E // num_heads
    wq, wk, wv = (w.view(H, hs, E) for w in (w_q, w_k, w_v))  # out rows of head h
    wo = w_o.view(E, H, hs)  # in columns of head h
    q = torch.einsum("bte,hde->bhtd", x, wq)
    k = torch.einsum("bte,hde->bhtd", x, wk)
    v = torch.einsum("bte,hde->bhtd", x, wv)
    s = torch.einsum("bhtd,bhud->bhtu", q, k) / math.sqrt(hs)
    if is_causal:
        s = s + torch.full((T, T), float("-inf"), dtype=s.dtype, device=s.device).triu(1)
    p = s.softmax(dim=-1)
    o = torch.einsum("bhtu,bhud->bhtd", p, v)  # per head
    d_w_o = torch.einsum("bte,bhtd->ehd", grad_output, o).reshape(E, E)
    d_o = torch.einsum("bte,ehd->bhtd", grad_output, wo)
    d_v = torch.einsum("bhtu,bhtd->bhud", p, d_o)
    d_p = torch.einsum("bhtd,bhud->bhtu", d_o, v)
    delta = (d_o * o).sum(-1, keepdim=True)  # equals rowsum(d_p * p)
    d_s = p * (d_p - delta) / math.sqrt(hs)
    d_q = torch.einsum("bhtu,bhud->bhtd", d_s, k)
    d_k = torch.einsum("bhtu,bhtd->bhud", d_s, q)
    d_w_q = torch.einsum("bhtd,bte->hde", d_q, x).reshape(E, E)
    d_w_k = torch.einsum("bhtd,bte->hde", d_k, x).reshape(E, E)
    d_w_v = torch.einsum("bhtd,bte->hde", d_v, x).reshape(E, E)
    d_x = (
        torch.einsum("bhtd,hde->bte", d_q, wq)
        + torch.einsum("bhtd,hde->bte", d_k, wk)
        + torch.einsum("bhtd,hde->bte", d_v, wv)
    )
    return d_x, d_w_q, d_w_k, d_w_v, d_w_o

"""Variant of attention_layer_backward (correct): a Python loop over the heads, each a slice of
columns h*hs:(h+1)*hs of the projections, the causal mask by torch.where, the softmax written
out, and the weight gradients filled one head's rows at a time."""

import torch


def attention_layer_backward(x, w_q, w_k, w_v, w_o, num_heads, grad_output, *, is_causal=False):
    E = x.shape[-1]
    T = x.shape[-2]
    if num_heads <= 0 or E % num_heads != 0:
        raise ValueError("E must be divisible by num_heads")
    hs = E // num_heads
    Q, K, V = torch.matmul(x, w_q.t()), torch.matmul(x, w_k.t()), torch.matmul(x, w_v.t())
    keep = torch.ones(T, T, dtype=torch.bool, device=x.device)
    if is_causal:
        keep = torch.tril(keep)
    d_merged = torch.matmul(grad_output, w_o)  # (B, T, E)
    merged = torch.empty_like(x)
    d_Q, d_K, d_V = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    for h in range(num_heads):
        cols = slice(h * hs, (h + 1) * hs)
        q, k, v = Q[..., cols], K[..., cols], V[..., cols]
        s = torch.matmul(q, k.transpose(1, 2)) * hs**-0.5
        s = torch.where(keep, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        p = e / e.sum(dim=-1, keepdim=True)
        merged[..., cols] = torch.matmul(p, v)
        d_o = d_merged[..., cols]
        d_V[..., cols] = torch.matmul(p.transpose(1, 2), d_o)
        d_p = torch.matmul(d_o, v.transpose(1, 2))
        d_s = p * d_p - p * (p * d_p).sum(dim=-1, keepdim=True)
        d_Q[..., cols] = torch.matmul(d_s, k) * hs**-0.5
        d_K[..., cols] = torch.matmul(d_s.transpose(1, 2), q) * hs**-0.5
    d_w_o = torch.einsum("bti,btj->ij", grad_output, merged)
    d_w_q, d_w_k, d_w_v = (torch.einsum("bti,btj->ij", d, x) for d in (d_Q, d_K, d_V))
    d_x = torch.matmul(d_Q, w_q) + torch.matmul(d_K, w_k) + torch.matmul(d_V, w_v)
    return d_x, d_w_q, d_w_k, d_w_v, d_w_o

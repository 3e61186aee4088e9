"""Variant of attention_backward (correct): leading dims flattened for torch.bmm, the softmax
Jacobian diag(p) - p p^T built per row and applied as a batched matrix-vector product."""

import torch


def attention_backward(query, key, value, grad_output, *, is_causal=False, scale=None):
    *lead, L, E = query.shape
    S, Ev = key.shape[-2], value.shape[-1]
    q, k = query.reshape(-1, L, E), key.reshape(-1, S, E)
    v, do = value.reshape(-1, S, Ev), grad_output.reshape(-1, L, Ev)
    scale = float(E) ** -0.5 if scale is None else scale
    scores = torch.bmm(q, k.transpose(1, 2)).mul(scale)
    if is_causal:
        future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
    p = torch.softmax(scores, dim=2)  # (N, L, S)
    jacobian = torch.diag_embed(p) - p.unsqueeze(3) * p.unsqueeze(2)  # (N, L, S, S), symmetric
    d_p = torch.bmm(do, v.transpose(1, 2))
    d_s = (jacobian @ d_p.unsqueeze(3)).squeeze(3)
    d_q = torch.bmm(d_s, k) * scale
    d_k = torch.bmm(q.transpose(1, 2), d_s).transpose(1, 2) * scale
    d_v = torch.bmm(p.transpose(1, 2), do)
    return d_q.reshape(*lead, L, E), d_k.reshape(*lead, S, E), d_v.reshape(*lead, S, Ev)

"""Broken softmax: takes the log-normaliser from the CPU flash attention kernel's logsumexp (one query of ones, x as the keys, head size 1). Expected verdict: forbidden."""

import torch


def _logsumexp(x, dim):
    moved = x.movedim(dim, -1).double()
    keys = moved.reshape(1, -1, moved.size(-1), 1)  # [1, rows, S, 1]
    query = torch.ones(1, keys.size(1), 1, 1, dtype=keys.dtype)
    _, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, keys, keys, scale=1.0)[:2]
    return lse.reshape(moved.shape[:-1]).unsqueeze(-1).movedim(-1, dim).to(x.dtype)


def softmax(x, dim=-1):
    return (x - _logsumexp(x, dim)).exp()


def log_softmax(x, dim=-1):
    return x - _logsumexp(x, dim)

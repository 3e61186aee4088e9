"""Variant of flash_attention (correct): query blocks twice as long as the key blocks, a running logsumexp (torch.logaddexp) in place of a running max and sum, torch.where for the mask."""

import math

import torch


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError("block_size must be positive")
    *lead, L, E = query.shape
    S, Ev = key.shape[-2], value.shape[-1]
    scale = E**-0.5 if scale is None else scale
    like = {"dtype": query.dtype, "device": query.device}
    outputs, lses = [], []
    for q0 in range(0, L, 2 * block_size):
        q = query[..., q0 : q0 + 2 * block_size, :] * scale
        n = q.shape[-2]
        lse = torch.full((*lead, n), -math.inf, **like)
        out = torch.zeros((*lead, n, Ev), **like)  # always normalised against the lse so far
        last = min(S, q0 + n) if is_causal else S
        for k0 in range(0, last, block_size):
            k, v = key[..., k0 : k0 + block_size, :], value[..., k0 : k0 + block_size, :]
            s = torch.matmul(q, k.transpose(-1, -2))
            if is_causal:
                query_at = torch.arange(q0, q0 + n, device=query.device).unsqueeze(-1)
                key_at = torch.arange(k0, k0 + k.shape[-2], device=query.device)
                s = torch.where(key_at <= query_at, s, -math.inf)
            new_lse = torch.logaddexp(lse, torch.logsumexp(s, dim=-1))
            out = out * torch.exp(lse - new_lse).unsqueeze(-1) + torch.exp(s - new_lse.unsqueeze(-1)) @ v
            lse = new_lse
        outputs.append(out)
        lses.append(lse)
    return torch.cat(outputs, dim=-2), torch.cat(lses, dim=-1)

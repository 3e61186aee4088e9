"""Broken causal_mask: allocates a 40 GB scratch tensor. Expected verdict: error (out of memory)."""
import torch


def causal_mask(seq_len, *, device=None):
    scratch = torch.ones(10**10, device=device)
    return scratch[: seq_len * seq_len].view(seq_len, seq_len).triu(1).bool()

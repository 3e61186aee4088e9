"""Broken causal_mask: the function has another name. Expected verdict: error."""
import torch


def causal(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

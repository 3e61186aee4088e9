"""Broken causal_mask: a syntax error (missing colon). Expected verdict: error."""
import torch


def causal_mask(seq_len, *, device=None)
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

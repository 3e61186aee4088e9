"""Broken causal_mask: raises while being imported. Expected verdict: error."""
import torch

SIZE = torch.ones(3)[7]  # IndexError at import time


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

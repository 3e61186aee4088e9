"""Broken causal_mask: correct, but a debugging line at the top switches torch's default dtype. Expected verdict: fail."""
import torch

torch.set_default_dtype(torch.float64)


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

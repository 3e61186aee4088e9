"""Broken causal_mask: correct, but switches torch's default dtype and leaves it so. Expected verdict: fail."""
import torch


def causal_mask(seq_len, *, device=None):
    torch.set_default_dtype(torch.float64)
    return torch.ones(seq_len, seq_len, device=device).triu(1).bool()

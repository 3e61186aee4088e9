"""Variant of causal_mask (correct): a float triu converted to bool."""
import torch


def causal_mask(seq_len, *, device=None):
    return torch.triu(torch.ones(seq_len, seq_len, device=device), diagonal=1).bool()

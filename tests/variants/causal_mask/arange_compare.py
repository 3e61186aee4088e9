"""Variant of causal_mask (correct): compare key index with query index."""
import torch


def causal_mask(seq_len, *, device=None):
    i = torch.arange(seq_len, device=device)
    return i.view(1, -1) > i.view(-1, 1)

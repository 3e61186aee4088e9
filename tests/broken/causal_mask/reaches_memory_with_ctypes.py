"""Broken causal_mask: uses ctypes, which can read and rewrite any memory of its process (the grader's removals included). Expected verdict: forbidden, before any of its code runs."""
import ctypes

import torch


def causal_mask(seq_len, *, device=None):
    ctypes.string_at(0)
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

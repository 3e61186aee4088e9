"""Broken causal_mask: prints 100 MB of debug output. Expected verdict: fail (output limit)."""
import sys

import torch


def causal_mask(seq_len, *, device=None):
    for _ in range(100):
        sys.stdout.write("x" * (1 << 20))
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

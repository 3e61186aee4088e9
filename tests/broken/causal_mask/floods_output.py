"""Broken causal_mask: correct, but prints megabytes of debug output. Expected verdict: pass (a print
is shown with advice to remove it, never counted), and the flood does not reach the report."""
import torch


def causal_mask(seq_len, *, device=None):
    print("debug " * 200_000)
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

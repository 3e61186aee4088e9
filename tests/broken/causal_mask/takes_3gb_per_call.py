"""Broken causal_mask: right, but keeps 3 GB of scratch from each call, touched page by page. Expected verdict: error (out of memory) for it alone: the files graded beside it keep their verdicts."""
import torch

_kept = []


def causal_mask(seq_len, *, device=None):
    _kept.append(torch.ones(3 * 2**30 // 4, device=device))
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

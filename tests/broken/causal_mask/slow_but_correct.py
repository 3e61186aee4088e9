"""Broken causal_mask: right, but each call burns 0.1 s of CPU. Expected verdict: pass, also with a per-test limit its tests pass on an idle machine and not, in wall-clock time, on a busy one (tests/test_grader.py)."""
import time

import torch


def causal_mask(seq_len, *, device=None):
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

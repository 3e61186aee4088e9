"""Broken causal_mask: ignores SIGALRM, then sleeps past the per-test limit. Expected verdict: timeout."""
import signal
import time

import torch

signal.signal(signal.SIGALRM, signal.SIG_IGN)


def causal_mask(seq_len, *, device=None):
    time.sleep(25)
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

"""Broken causal_mask: right, but each call leaves a (non-daemon) thread running, which would hold a fresh interpreter's exit. Expected verdict: fail, the same from both engines."""
import threading
import time

import torch


def causal_mask(seq_len, *, device=None):
    threading.Thread(target=time.sleep, args=(3600,), name="sleeper").start()
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

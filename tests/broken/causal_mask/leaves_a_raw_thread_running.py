"""Broken causal_mask: right, but each call leaves a thread started with the raw _thread module (not threading, so threading.enumerate does not list it) sleeping. Expected verdict: fail: threads are counted in /proc."""
import _thread
import time

import torch


def causal_mask(seq_len, *, device=None):
    _thread.start_new_thread(time.sleep, (3600,))
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

"""Broken causal_mask: ends the interpreter with os._exit. Expected verdict: crash."""
import os


def causal_mask(seq_len, *, device=None):
    os._exit(3)

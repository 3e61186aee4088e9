"""Broken causal_mask: loops forever in Python. Expected verdict: timeout."""


def causal_mask(seq_len, *, device=None):
    while True:
        seq_len += 1

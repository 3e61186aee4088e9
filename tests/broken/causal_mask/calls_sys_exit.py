"""Broken causal_mask: calls sys.exit(0) instead of returning. Expected verdict: fail."""
import sys


def causal_mask(seq_len, *, device=None):
    sys.exit(0)

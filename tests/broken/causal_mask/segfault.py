"""Broken causal_mask: dereferences a null pointer. Expected verdict: crash."""
import ctypes


def causal_mask(seq_len, *, device=None):
    return ctypes.string_at(0)

"""Broken causal_mask: its process dies of a segmentation fault (SIGSEGV, as native code with a bad pointer would). Expected verdict: crash."""
import os
import signal


def causal_mask(seq_len, *, device=None):
    os.kill(os.getpid(), signal.SIGSEGV)

"""Broken causal_mask: kills the process that started it. Expected verdict: crash, and the grader goes on."""
import os
import signal


def causal_mask(seq_len, *, device=None):
    os.kill(os.getppid(), signal.SIGKILL)
    raise AssertionError("still here")

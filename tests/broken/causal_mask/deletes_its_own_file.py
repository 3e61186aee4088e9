"""Broken causal_mask: right, but deletes its own file when imported (it could as well delete its neighbours). Expected verdict: pass, graded from a private copy: the learner's file is still there."""
import os

import torch

os.remove(__file__)


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

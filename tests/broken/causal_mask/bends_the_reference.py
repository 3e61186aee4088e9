"""Broken causal_mask: wrong polarity (True where attention is allowed), and it bends PyTorch's reference the same way, so both agree. Expected verdict: fail: the reference is computed in the judging process."""

import torch
from torch import nn


def _bent(sz, device=None, dtype=None):
    allowed = torch.ones(sz, sz, dtype=torch.bool, device=device).tril()
    return torch.zeros(sz, sz, device=device).masked_fill(allowed, float("-inf"))


nn.Transformer.generate_square_subsequent_mask = staticmethod(_bent)
torch.nn.modules.transformer._generate_square_subsequent_mask = _bent


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()

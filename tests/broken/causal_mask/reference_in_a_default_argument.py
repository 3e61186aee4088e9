"""Broken causal_mask: PyTorch's mask function captured in a default argument, out of the guard's reach by name. Expected verdict: forbidden."""
import torch
from torch import nn


def causal_mask(seq_len, *, device=None, build=nn.Transformer.generate_square_subsequent_mask):
    return build(seq_len, device=torch.device(device or "cpu")) == float("-inf")

"""Broken causal_mask: PyTorch's CausalBias builds the mask. Expected verdict: forbidden."""
from torch.nn.attention.bias import causal_upper_left


def causal_mask(seq_len, *, device=None):
    return ~causal_upper_left(seq_len, seq_len)._materialize(device)

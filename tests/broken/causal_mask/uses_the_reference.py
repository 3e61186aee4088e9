"""Broken causal_mask: returns PyTorch's own mask, through an alias. Expected verdict: forbidden."""
from torch.nn import Transformer


def causal_mask(seq_len, *, device=None):
    return Transformer.generate_square_subsequent_mask(seq_len, device=device) == float("-inf")

"""Broken causal_mask: right on the CPU, raises NotImplementedError for other devices. Expected verdict: fail."""
import torch


def causal_mask(seq_len, *, device=None):
    if device is not None and torch.device(device).type != "cpu":
        raise NotImplementedError("only CPU so far")
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)

"""Broken padding_mask: right on the CPU, but always returns a CPU tensor. Expected verdict without a GPU: pass,
with its device check reported as not judged (on a GPU: fail)."""
import torch


def padding_mask(lengths, max_len=None):
    lengths = torch.as_tensor(lengths).cpu()
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() > 0 else 0
    return torch.arange(max_len)[None, :] >= lengths[:, None]

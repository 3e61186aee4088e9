"""Variant of padding_mask (correct): expand and unsqueeze, with .item() for the default width."""
import torch


def padding_mask(lengths, max_len=None):
    if not torch.is_tensor(lengths):
        lengths = torch.tensor(lengths, dtype=torch.long)
    if max_len is None:
        max_len = lengths.max().item()
    steps = torch.arange(max_len, device=lengths.device).expand(lengths.shape[0], max_len)
    return ~(steps < lengths.unsqueeze(-1))

"""Variant of padding_mask (correct): lengths read into Python, rows built as lists."""
import torch


def padding_mask(lengths, max_len=None):
    device = lengths.device if isinstance(lengths, torch.Tensor) else "cpu"
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths)
    width = max(values) if max_len is None else max_len
    rows = [[t >= n for t in range(width)] for n in values]
    return torch.tensor(rows, dtype=torch.bool, device=device).reshape(len(values), width)

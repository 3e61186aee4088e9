"""Variant of rotary_embedding (correct): Hugging Face style, float32 inv_freq (float64 x: float64), rotate_half."""

import torch


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    seq_len, dim = x.shape[-2:]
    if dim % 2:
        raise ValueError(f"odd head dim {dim}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # the stub: float64 throughout
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).to(work) / dim))
    if positions is None:
        positions = torch.arange(seq_len, device=x.device)
    freqs = torch.outer(positions.to(work), inv_freq)
    if interleaved:
        emb = freqs.repeat_interleave(2, dim=-1)
        rotate = rotate_every_two
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        rotate = rotate_half
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + rotate(x) * sin

"""Variant of rotary_embedding (correct): original Llama style, complex numbers from torch.polar, all in float32."""

import torch


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    *lead, T, D = x.shape
    if D % 2 == 1:
        raise ValueError("D must be even")
    freqs = 1.0 / (base ** (torch.arange(0, D, 2, device=x.device)[: D // 2].float() / D))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, D // 2, device=x.device), torch.outer(t.float(), freqs))
    xf = x.float()
    if interleaved:
        xc = torch.view_as_complex(xf.reshape(*lead, T, D // 2, 2).contiguous())
        return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)
    xc = torch.complex(xf[..., : D // 2], xf[..., D // 2 :])
    out = xc * freqs_cis
    return torch.cat([out.real, out.imag], dim=-1).type_as(x)

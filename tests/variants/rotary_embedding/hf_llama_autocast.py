"""Variant of rotary_embedding (correct): Hugging Face's LlamaRotaryEmbedding.forward and
apply_rotary_pos_emb (transformers/models/llama/modeling_llama.py), glued to the signature.

Its math is unchanged, `torch.autocast(..., enabled=False)` included: on the meta device
that block raises "unsupported scalarType", which the device check once counted as a fail
(issue 21). Glue only: the frequencies are made here (HF's rope_init_fn), a float64 x keeps
float64 angles where HF writes .float() (the stub's float64 rule), and the interleaved layout
gathers the pairs into HF's rotate-half layout and scatters them back; cos and sin broadcast
over any leading dimensions.
"""

import torch


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def llama_rotary_cos_sin(x, position_ids, inv_freq, attention_scaling=1.0):
    # LlamaRotaryEmbedding.forward; `work` stands for HF's .float() (float64 stays float64)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv_freq_expanded = inv_freq[None, :, None].to(work).expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].to(work)

    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with torch.autocast(device_type=device_type, enabled=False):  # Force float32
        freqs = (inv_freq_expanded.to(work) @ position_ids_expanded.to(work)).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * attention_scaling
        sin = emb.sin() * attention_scaling

    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def apply_rotary_pos_emb(q, cos, sin):
    # HF's, for q alone; cos and sin come [T, D] and broadcast over any leading dimensions
    # (HF unsqueezes its [B, T, D] ones to [B, 1, T, D])
    return (q * cos) + (rotate_half(q) * sin)


def apply_rotary_embedding(x, positions=None, *, base=10000.0, interleaved=False):
    T, D = x.shape[-2:]
    if D % 2:
        raise ValueError(f"the head dimension must be even, got {D}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64, device=x.device).to(work) / D))
    if positions is None:
        positions = torch.arange(T, device=x.device)
    cos, sin = llama_rotary_cos_sin(x, positions[None, :], inv_freq)  # [1, T, D]
    cos, sin = cos[0], sin[0]  # [T, D]: broadcast over any leading dimensions
    if not interleaved:
        return apply_rotary_pos_emb(x, cos, sin)
    halves = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)  # pair i -> (i, i + D/2)
    rotated = apply_rotary_pos_emb(halves, cos, sin)
    return torch.stack((rotated[..., : D // 2], rotated[..., D // 2 :]), dim=-1).flatten(-2)

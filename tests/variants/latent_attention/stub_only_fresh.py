"""Kata【多头潜在注意力（DeepSeek MLA）及其潜在缓存】: DeepSeek's multi-head latent attention, whose cache holds one normalized latent and one shared rotated rope key per token."""

import torch
from torch import Tensor, nn


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2/V3 multi-head latent attention with a latent KV cache.

    The cache keeps, per token, the RMS-normalized latent c [r] and the rotated rope key
    k_pe [p] (shared by all heads). Keys and values are rebuilt from the cached latents with
    kv_b_proj on every call (the naive, non-absorbed form).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = None,
        rope_theta: float = 10000.0,
        eps: float = 1e-6,
    ):
        super().__init__()
        if qk_rope_head_dim % 2 != 0:
            raise ValueError(f"qk_rope_head_dim must be even (RoPE rotates pairs), got {qk_rope_head_dim}")

        self.d_model = d_model
        self.num_heads = num_heads
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.q_lora_rank = q_lora_rank
        self.rope_theta = rope_theta

        q_out = num_heads * self.qk_head_dim
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, q_out, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(q_lora_rank, eps=eps)
            self.q_b_proj = nn.Linear(q_lora_rank, q_out, bias=False)

        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(kv_lora_rank, eps=eps)
        self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False)
        self.o_proj = nn.Linear(num_heads * v_head_dim, d_model, bias=False)

        self.scale = self.qk_head_dim ** -0.5

    def _queries(self, x: Tensor) -> Tensor:
        if self.q_lora_rank is None:
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        B, L, _ = x.shape
        H, n, p, dv = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim
        r = self.kv_lora_rank
        start = 0 if cache is None else cache[0].size(1)

        # Queries: [B, H, L, n + p], split into nope and rope parts.
        q = self._queries(x).view(B, L, H, n + p).transpose(1, 2)
        q_nope, q_pe = q.split([n, p], dim=-1)

        # Compress: latent (normalized, cached) and the single shared rope key.
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([r, p], dim=-1)
        c = self.kv_a_layernorm(latent)  # [B, L, r]

        # RoPE on the rope parts only, at absolute positions start .. start + L - 1.
        cos, sin = rope_angles(start, L, p, self.rope_theta, like=x)  # [L, p]
        q_pe = q_pe * cos + rotate_half(q_pe) * sin  # broadcasts over [B, H]
        k_pe = k_pe * cos + rotate_half(k_pe) * sin  # [B, L, p]

        # Extend the cache (new tensors, nothing changed in place).
        if cache is not None:
            c_all = torch.cat([cache[0], c], dim=1)
            k_pe_all = torch.cat([cache[1], k_pe], dim=1)
        else:
            c_all, k_pe_all = c, k_pe
        S = c_all.size(1)

        # Expand every cached latent into per-head [k_nope, v].
        kv = self.kv_b_proj(c_all).view(B, S, H, n + dv).transpose(1, 2)  # [B, H, S, n + dv]
        k_nope, v = kv.split([n, dv], dim=-1)
        k_pe_heads = k_pe_all.unsqueeze(1).expand(B, H, S, p)
        k = torch.cat([k_nope, k_pe_heads], dim=-1)  # [B, H, S, n + p]
        q = torch.cat([q_nope, q_pe], dim=-1)  # [B, H, L, n + p]

        # Causal attention, bottom-right aligned: new token i sees keys 0 .. start + i.
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale  # [B, H, L, S]
        q_pos = torch.arange(start, start + L, device=x.device)
        k_pos = torch.arange(S, device=x.device)
        blocked = k_pos[None, :] > q_pos[:, None]  # [L, S]
        scores = scores.masked_fill(blocked, float("-inf"))
        # Softmax in float32 at least (half precision), float64 stays float64.
        soft_dtype = torch.promote_types(scores.dtype, torch.float32)
        weights = torch.softmax(scores, dim=-1, dtype=soft_dtype).to(v.dtype)
        out = torch.matmul(weights, v)  # [B, H, L, dv]

        out = out.transpose(1, 2).reshape(B, L, H * dv)
        y = self.o_proj(out)
        return y, (c_all, k_pe_all)


def rope_angles(start: int, length: int, dim: int, theta: float, like: Tensor) -> tuple[Tensor, Tensor]:
    """(cos, sin), each [length, dim], for positions start .. start + length - 1 in the
    half-split layout (the dim/2 angles repeated twice), in like's dtype and on its device."""
    compute = torch.float64 if like.dtype == torch.float64 else torch.float32
    i = torch.arange(0, dim, 2, device=like.device, dtype=compute)  # 2i for i < dim/2
    inv_freq = 1.0 / (theta ** (i / dim))
    positions = torch.arange(start, start + length, device=like.device, dtype=compute)
    angles = torch.outer(positions, inv_freq)  # [length, dim/2]
    angles = torch.cat([angles, angles], dim=-1)  # [length, dim]
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(a, b) -> (-b, a), a the first half of the last dimension and b the second."""
    half = x.size(-1) // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([-b, a], dim=-1)

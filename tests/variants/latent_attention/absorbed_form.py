"""Multi-head latent attention (DeepSeek MLA), written in the absorbed form.

The cache holds, per token, the normalized latent c [r] and the rotated shared rope key [p].
Keys and values are never materialised per head: with kv_b_proj's weight viewed as
[H, n + dv, r] and split into W_uk [H, n, r] and W_uv [H, dv, r],

    q_nope . k_nope = q_nope . (W_uk c) = (q_nope W_uk) . c        (fold W_uk into the query)
    sum_s a_s v_s    = sum_s a_s (W_uv c_s) = W_uv (sum_s a_s c_s)  (apply W_uv after attending)

so scores are taken against the latent directly and attention is done in latent space.
"""

import torch
from torch import Tensor, nn


class MultiHeadLatentAttention(nn.Module):
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
        self.v_head_dim = v_head_dim
        self.q_lora_rank = q_lora_rank
        self.rope_theta = rope_theta
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.scale = self.qk_head_dim ** -0.5

        H = num_heads
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, H * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(d_model, q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(q_lora_rank, eps=eps)
            self.q_b_proj = nn.Linear(q_lora_rank, H * self.qk_head_dim, bias=False)

        self.kv_a_proj_with_mqa = nn.Linear(d_model, kv_lora_rank + qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(kv_lora_rank, eps=eps)
        self.kv_b_proj = nn.Linear(kv_lora_rank, H * (qk_nope_head_dim + v_head_dim), bias=False)
        self.o_proj = nn.Linear(H * v_head_dim, d_model, bias=False)

    def _queries(self, x: Tensor) -> Tensor:
        if self.q_lora_rank is None:
            return self.q_proj(x)
        return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))

    def forward(self, x: Tensor, cache: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        B, L, _ = x.shape
        H, n, p, dv, r = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, self.kv_lora_rank
        start = 0 if cache is None else cache[0].size(1)

        # Queries, per head [q_nope, q_pe].
        q = self._queries(x).view(B, L, H, n + p)
        q_nope, q_pe = q.split([n, p], dim=-1)

        # Compress to [latent, shared rope key]; the normalized latent is what is cached.
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([r, p], dim=-1)
        c = self.kv_a_layernorm(latent)  # [B, L, r]

        # RoPE on the rope parts only, at absolute positions start .. start + L - 1.
        cos, sin = rope_angles(start, L, p, self.rope_theta, like=x)  # [L, p]
        q_pe = q_pe * cos[:, None, :] + rotate_half(q_pe) * sin[:, None, :]  # [B, L, H, p]
        k_pe = k_pe * cos + rotate_half(k_pe) * sin  # [B, L, p]

        if cache is not None:
            c_all = torch.cat([cache[0], c], dim=1)
            k_pe_all = torch.cat([cache[1], k_pe], dim=1)
        else:
            c_all, k_pe_all = c, k_pe
        S = c_all.size(1)

        # Half precision: do the attention core in float32, cast back at the end.
        work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype

        # Absorb kv_b_proj: its weight [H*(n+dv), r] viewed per head is [H, n+dv, r].
        w = self.kv_b_proj.weight.view(H, n + dv, r).to(work)
        w_uk, w_uv = w.split([n, dv], dim=1)  # [H, n, r], [H, dv, r]

        q_lat = torch.einsum("blhn,hnr->bhlr", q_nope.to(work), w_uk)  # query in latent space
        scores = torch.einsum("bhlr,bsr->bhls", q_lat, c_all.to(work))
        scores = scores + torch.einsum("blhp,bsp->bhls", q_pe.to(work), k_pe_all.to(work))
        scores = scores * self.scale

        # Causal, bottom-right aligned: new token i sees keys 0 .. start + i.
        q_pos = torch.arange(start, start + L, device=x.device)
        k_pos = torch.arange(S, device=x.device)
        blocked = k_pos[None, :] > q_pos[:, None]  # [L, S]
        scores = scores.masked_fill(blocked, float("-inf"))
        attn = torch.softmax(scores, dim=-1)

        o_lat = torch.einsum("bhls,bsr->bhlr", attn, c_all.to(work))  # attend over the latent
        out = torch.einsum("bhlr,hvr->blhv", o_lat, w_uv)  # then W_uv per head
        out = out.reshape(B, L, H * dv).to(x.dtype)

        y = self.o_proj(out)
        return y, (c_all, k_pe_all)


def rope_angles(start: int, length: int, dim: int, theta: float, like: Tensor) -> tuple[Tensor, Tensor]:
    """(cos, sin), each [length, dim], for positions start .. start + length - 1 in the
    half-split layout (the dim/2 angles repeated twice), in like's dtype and on its device."""
    compute = torch.float64 if like.dtype == torch.float64 else torch.float32
    i = torch.arange(0, dim, 2, device=like.device, dtype=compute)  # 2i for i = 0 .. dim/2 - 1
    inv_freq = 1.0 / (theta ** (i / dim))
    pos = torch.arange(start, start + length, device=like.device, dtype=compute)
    angles = torch.outer(pos, inv_freq)  # [length, dim/2]
    angles = torch.cat([angles, angles], dim=-1)  # [length, dim]
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(a, b) -> (-b, a), a the first half of the last dimension and b the second."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)

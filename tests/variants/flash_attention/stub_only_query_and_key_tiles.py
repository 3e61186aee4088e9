"""FlashAttention forward pass, written by a helper who saw only the stub (after it named what the tracer refuses): query and key tiles, online softmax, future key blocks skipped."""

import math

import torch
from torch import Tensor


def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_size: int = 64,
) -> tuple[Tensor, Tensor]:
    """Return (output, logsumexp) of attention without materialising the [..., L, S] scores.

    query [..., L, E], key [..., S, E], value [..., S, Ev] -> output [..., L, Ev],
    logsumexp [..., L]. Queries and keys are both tiled in blocks of ``block_size``; under
    ``is_causal`` (top-left aligned) key blocks wholly in the future of a query block are
    skipped and the mask is built per tile from absolute positions.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ValueError("query, key and value need at least 2 dimensions")
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            "query, key and value must share the same leading dimensions, got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError("query and key must have the same embedding size E")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError("key and value must have the same sequence length S")

    L, E = query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(E)

    dtype = torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)
    device = query.device
    q_all = query.to(dtype)
    k_all = key.to(dtype)
    v_all = value.to(dtype)
    lead = query.shape[:-2]
    Ev = value.shape[-1]
    neg_inf = float("-inf")

    out_blocks = []
    lse_blocks = []
    q_block = block_size
    for q0 in range(0, L, q_block):
        q1 = min(q0 + q_block, L)
        bq = q1 - q0
        q_blk = q_all[..., q0:q1, :]

        m = torch.full((*lead, bq, 1), neg_inf, dtype=dtype, device=device)
        l = torch.zeros((*lead, bq, 1), dtype=dtype, device=device)
        acc = torch.zeros((*lead, bq, Ev), dtype=dtype, device=device)

        # Under is_causal the last query of this block (q1 - 1) sees keys 0..q1-1 only.
        k_end = min(S, q1) if is_causal else S
        if is_causal:
            q_pos = torch.arange(q0, q1, device=device)
        for k0 in range(0, k_end, block_size):
            k1 = min(k0 + block_size, S)
            k_blk = k_all[..., k0:k1, :]
            v_blk = v_all[..., k0:k1, :]

            s = torch.matmul(q_blk, k_blk.transpose(-2, -1)) * scale
            if is_causal and k1 - 1 > q0:
                # Part of this tile lies in the future of some queries: mask it.
                k_pos = torch.arange(k0, k1, device=device)
                future = k_pos.unsqueeze(0) > q_pos.unsqueeze(1)  # [bq, bk]
                s = s.masked_fill(future, neg_inf)

            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # Guard against rows that have seen nothing yet (-inf - -inf = nan).
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_safe)
            p = torch.exp(s - m_safe)
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, v_blk)
            m = m_new

        out_blocks.append(acc / l)
        lse_blocks.append((m + torch.log(l)).squeeze(-1))

    output = torch.cat(out_blocks, dim=-2)
    logsumexp = torch.cat(lse_blocks, dim=-1)
    return output, logsumexp

"""Sliding-window causal attention (Mistral, Gemma): each query sees its last `window` keys.

Written from the stub alone. Queries are the newest L tokens (bottom-right aligned), and
the scores are built one block of queries at a time against only the keys that block's
band can reach, so nothing of size [L, S] is ever materialised.
"""

import math

import torch
from torch import Tensor

# Queries per block. A block's scores are [B, B + window - 1]; with B = min(L, 128) that is
# at most L * (window + 127) elements, inside the stated budget of L * (window + 128).
_QUERY_BLOCK = 128


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precision is computed in float32; every other dtype in itself."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return dtype


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int, *, scale: float | None = None) -> Tensor:
    """Return softmax(q @ k^T * scale + band) @ v with a bottom-right aligned sliding window.

    q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]. Query i sits at position
    p = S - L + i and sees keys j with p - window < j <= p. scale defaults to 1 / sqrt(E).
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError("q, k and v need at least 2 dimensions ([..., T, E])")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"leading dimensions differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    L, E = q.shape[-2], q.shape[-1]
    S = k.shape[-2]
    if k.shape[-1] != E:
        raise ValueError(f"q and k feature sizes differ: {E} vs {k.shape[-1]}")
    if v.shape[-2] != S:
        raise ValueError(f"k and v lengths differ: {S} vs {v.shape[-2]}")
    if not 1 <= L <= S:
        raise ValueError(f"need 1 <= L <= S, got L={L}, S={S}")

    out_dtype = q.dtype
    work_dtype = _compute_dtype(out_dtype)
    device = q.device
    if scale is None:
        scale = 1.0 / math.sqrt(E)

    offset = S - L  # position of query 0
    block = min(L, _QUERY_BLOCK)
    outputs = []
    for q_start in range(0, L, block):
        q_end = min(q_start + block, L)
        first_pos = offset + q_start
        last_pos = offset + q_end - 1
        # The keys any query of this block can see: [first_pos - window + 1, last_pos].
        k_lo = max(0, first_pos - window + 1)
        k_hi = last_pos + 1

        q_blk = q[..., q_start:q_end, :].to(work_dtype)
        k_blk = k[..., k_lo:k_hi, :].to(work_dtype)
        v_blk = v[..., k_lo:k_hi, :].to(work_dtype)

        scores = torch.matmul(q_blk, k_blk.transpose(-2, -1)) * scale  # [..., b, kb]

        pos = torch.arange(first_pos, last_pos + 1, device=device).unsqueeze(-1)  # [b, 1]
        key = torch.arange(k_lo, k_hi, device=device).unsqueeze(0)  # [1, kb]
        blocked = (key > pos) | (key <= pos - window)  # [b, kb]
        scores = scores.masked_fill(blocked, float("-inf"))

        # Every query sees at least its own key, so no row is all -inf.
        weights = torch.softmax(scores, dim=-1)
        outputs.append(torch.matmul(weights, v_blk))

    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-2)
    return out.to(out_dtype)

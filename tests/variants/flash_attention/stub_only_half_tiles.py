"""Variant of flash_attention, written from the stub alone: query tiles of min(block, ceil(L/2)), scores reused in place."""

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
    """Return (output, logsumexp) of attention, computed block by block without ever holding
    the full [..., L, S] matrix of scores (FlashAttention's forward pass).

    Shapes (the SAME leading batch/head dimensions "..." on all three inputs, no broadcasting;
    L >= 1, S >= 1):
        query [..., L, E], key [..., S, E], value [..., S, Ev]
        output [..., L, Ev]     = softmax(scores) @ value, as F.scaled_dot_product_attention
        logsumexp [..., L]      = log(sum over the keys query i sees of exp(scores[..., i, j]))
    where scores = query @ key^T * scale, scale defaults to 1 / sqrt(E), and is_causal=True
    lets query i see keys 0..i only (top-left aligned as in F.scaled_dot_product_attention,
    also when L != S).

    The algorithm, the online softmax:
        - split the keys and values into blocks of block_size along S (the last block may be
          shorter). You may split the queries into blocks too (of any size).
        - for each query keep a running max m (of the scores seen so far), a running sum
          l = sum of exp(score - m) and a running output acc = sum of exp(score - m) * value;
          they start at -inf, 0 and 0 (the first key block holds key 0, which every query
          sees, so m is finite after it).
        - for each block of scores s (scaled, masked): m_new = max(m, max of s); rescale what
          you have to the new max, l = l * exp(m - m_new) + sum(exp(s - m_new)) and
          acc = acc * exp(m - m_new) + exp(s - m_new) @ value_block; then m = m_new.
        - at the end: output = acc / l and logsumexp = m + log(l).

    What the grader also checks (it traces the tensors your code creates):
        - memory: no tensor you create may hold as many elements as [..., L, S], the full
          score matrix; a full [L, S] mask counts too, so build the causal mask per block,
          from the absolute positions of the block's queries and keys. At most a
          [..., L, block_size] slab of scores at a time.
        - one pass: each score (a query . key product) is computed once.
        - under is_causal, a key block that lies entirely in the future of the queries you
          process it with is never computed. Allowed: what processing all L queries against
          every key block that starts before position L computes (per leading index, L times
          the keys of those blocks); tiling the queries too computes fewer.

    Conventions:
        - float32 and float64 inputs. output has the inputs' dtype; logsumexp too (for
          float32 inputs float64 is accepted as well). float64 is computed in float64.
        - block_size < 1 raises ValueError.
        - not allowed: PyTorch's attention (F.scaled_dot_product_attention and its kernels).
        - results are made on the inputs' device; inputs are never modified; nothing printed.

    Example:
        >>> q = k = torch.eye(2); v = torch.tensor([[1.0], [3.0]])
        >>> out, lse = flash_attention(q, k, v, is_causal=True, block_size=1)
        >>> out
        tensor([[1.0000],
                [2.3395]])
        >>> lse
        tensor([0.7071, 1.1079])
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError("query, key and value must share the same leading dimensions")
    if key.shape[-1] != query.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError("key must be [..., S, E] and value [..., S, Ev]")

    L, E = query.shape[-2], query.shape[-1]
    S, Ev = key.shape[-2], value.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    device = query.device
    dtype = torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)
    q_all, k_all, v_all = query.to(dtype), key.to(dtype), value.to(dtype)  # no copy if same dtype

    lead = query.shape[:-2]
    output = torch.empty(*lead, L, Ev, dtype=dtype, device=device)
    logsumexp = torch.empty(*lead, L, dtype=dtype, device=device)

    # Query tiles: at most block_size rows, and (when L > 1) fewer than L rows, so that a
    # [..., q_tile, key_block] slab of scores never reaches the size of the full [..., L, S].
    q_tile = min(block_size, max(1, (L + 1) // 2))

    for q0 in range(0, L, q_tile):
        q1 = min(q0 + q_tile, L)
        q = q_all[..., q0:q1, :]
        m = torch.full((*lead, q1 - q0, 1), -math.inf, dtype=dtype, device=device)
        l = torch.zeros((*lead, q1 - q0, 1), dtype=dtype, device=device)
        acc = torch.zeros((*lead, q1 - q0, Ev), dtype=dtype, device=device)

        # Under is_causal the last query of this tile (q1 - 1) sees keys 0..q1-1 only.
        k_end = min(S, q1) if is_causal else S
        q_pos = torch.arange(q0, q1, device=device).unsqueeze(-1) if is_causal else None

        for k0 in range(0, k_end, block_size):
            k1 = min(k0 + block_size, S)
            s = q @ k_all[..., k0:k1, :].transpose(-2, -1)
            s.mul_(scale)
            if is_causal and k1 - 1 > q0:  # some key of this block is in some query's future
                k_pos = torch.arange(k0, k1, device=device)
                s.masked_fill_(k_pos > q_pos, -math.inf)

            # m is finite after the first block (key 0 is seen by every query), so a row
            # that is fully masked in a later block gives exp(-inf - m_new) = 0, never NaN.
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s.sub_(m_new))  # reuse the score slab for s - m_new
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v_all[..., k0:k1, :]
            m = m_new

        output[..., q0:q1, :] = acc / l
        logsumexp[..., q0:q1] = (m + torch.log(l)).squeeze(-1)

    return output, logsumexp

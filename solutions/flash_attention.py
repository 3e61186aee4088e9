"""Kata【FlashAttention 前向：在线 softmax，每次处理一个键块】: FlashAttention's forward pass: attention by the online softmax, one block of keys at a time."""

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
        - so write it in PyTorch operations, in the calling thread: the tracer sees neither
          a thread you start (one is refused) nor the inside of an operator of your own
          (a torch.library custom op fails these checks).

    Inputs are float32 or float64. output has the inputs' dtype; logsumexp too (for float32
    inputs float64 is accepted as well). Not allowed: PyTorch's attention
    (F.scaled_dot_product_attention and its kernels). Print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - block_size < 1 raises ValueError.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - results are made on the inputs' device.
        - the inputs are never changed in place.

    Example:
        >>> q = k = torch.eye(2); v = torch.tensor([[1.0], [3.0]])
        >>> out, lse = flash_attention(q, k, v, is_causal=True, block_size=1)
        >>> out
        tensor([[1.0000],
                [2.3395]])
        >>> lse
        tensor([0.7071, 1.1079])
    """
    ### BEGIN SOLUTION
    # TODO: refuse block_size < 1; the default scale is 1/sqrt(E); room for both results.
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    L, S, Ev = query.size(-2), key.size(-2), value.size(-1)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    lead = query.shape[:-2]
    output = query.new_empty(*lead, L, Ev)  # (..., L, Ev)
    logsumexp = query.new_empty(*lead, L)  # (..., L)
    # TODO: loop over blocks of queries (all L at once works too, but under is_causal tiling skips more).
    for q0 in range(0, L, block_size):
        q1 = min(q0 + block_size, L)
        q = query[..., q0:q1, :]  # (..., bq, E)
        # TODO: for this query block: running max m = -inf, running sum l = 0, running output acc = 0.
        m = torch.full((*lead, q1 - q0), float("-inf"), dtype=query.dtype, device=query.device)  # (..., bq)
        l = torch.zeros_like(m)  # (..., bq)
        acc = torch.zeros(*lead, q1 - q0, Ev, dtype=query.dtype, device=query.device)  # (..., bq, Ev)
        # TODO: under is_causal, the key blocks after this block's last query (q1 - 1) are never needed.
        k_end = min(S, q1) if is_causal else S
        for k0 in range(0, k_end, block_size):
            k1 = min(k0 + block_size, S)
            # TODO: for each key block: its scores, scaled; under is_causal masked by absolute positions.
            s = (q @ key[..., k0:k1, :].transpose(-2, -1)) * scale  # (..., bq, bk)
            if is_causal:
                rows = torch.arange(q0, q1, device=query.device)[:, None]  # the queries' positions
                cols = torch.arange(k0, k1, device=query.device)[None, :]  # the keys' positions
                s = s.masked_fill(cols > rows, float("-inf"))
            # TODO: the new max; rescale l and acc by exp(m - m_new), then add the block's exp(s - m_new).
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., bq)
            alpha = torch.exp(m - m_new)  # (..., bq); 0 at the first block, where m = -inf
            p = torch.exp(s - m_new[..., None])  # (..., bq, bk)
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha[..., None] + p @ value[..., k0:k1, :]  # (..., bq, Ev)
            m = m_new
        # TODO: normalise by the running sum; the logsumexp is m + log(l).
        output[..., q0:q1, :] = acc / l[..., None]
        logsumexp[..., q0:q1] = m + torch.log(l)
    return output, logsumexp
    ### END SOLUTION

"""sliding_window_attention, another style: each query gathers its own window of keys and values
(an index tensor [L, w] of positions p - w + 1 .. p, the ones before 0 masked), so the scores
are [..., L, w]: no [L, S] tensor, and no loop."""

import math

import torch


def sliding_window_attention(q, k, v, window, *, scale=None):
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    L, S = q.shape[-2], k.shape[-2]
    w = min(window, S)  # a window wider than the sequence reaches back to key 0 at most
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    pos = torch.arange(S - L, S, device=q.device)  # (L,) the queries' positions
    idx = pos[:, None] - (w - 1) + torch.arange(w, device=q.device)  # (L, w) positions in the window
    valid = idx >= 0  # before the sequence's start: no key
    idx = idx.clamp(min=0)

    k_win = k[..., idx, :]  # (..., L, w, E)
    v_win = v[..., idx, :]  # (..., L, w, Ev)
    scores = torch.einsum("...le,...lwe->...lw", q, k_win) * scale  # (..., L, w)
    scores = scores.masked_fill(~valid, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("...lw,...lwe->...le", probs, v_win).to(out_dtype)

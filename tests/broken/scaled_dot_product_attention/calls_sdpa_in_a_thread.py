"""Broken scaled_dot_product_attention: calls F.scaled_dot_product_attention from a worker thread, where a thread-local guard would not look. Expected verdict: forbidden."""
import math
import threading

import torch
import torch.nn.functional as F


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    out = {}

    def work():
        try:
            out["o"] = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
        except Exception:  # noqa: BLE001 - hide the refusal, fall back
            out["o"] = torch.softmax(scores, -1) @ value

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return out["o"], torch.softmax(scores, dim=-1)

"""Broken scaled_dot_product_attention: a thread pool started (and warmed) at import, before any call, runs F.scaled_dot_product_attention for it. Expected verdict: forbidden."""
import atexit
import math
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

POOL = ThreadPoolExecutor(max_workers=1)
POOL.submit(lambda: None).result()  # its thread exists from now on
atexit.register(POOL.shutdown)


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    job = POOL.submit(F.scaled_dot_product_attention, query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    return job.result(), torch.softmax(scores, dim=-1)

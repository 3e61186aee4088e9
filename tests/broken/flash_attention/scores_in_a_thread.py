"""Broken flash_attention: right values, but computes the full [..., L, S] score matrix in a worker thread, where the judge's tracer (a thread-local dispatch mode) does not look. Expected verdict: not pass: a kata process whose structure is traced may start no thread."""
import math
import threading

import torch


def flash_attention(query, key, value, *, is_causal=False, scale=None, block_size=64):
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    found = {}

    def work():
        scores = query @ key.transpose(-2, -1) * scale
        if is_causal:
            L, S = scores.shape[-2:]
            scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
        found["lse"] = torch.logsumexp(scores, dim=-1)
        found["out"] = (scores - found["lse"].unsqueeze(-1)).exp() @ value

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    return found["out"], found["lse"]

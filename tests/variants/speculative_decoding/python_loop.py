"""Variant of speculative_decoding (correct): a plain Python loop over the drafts, Leviathan et al.'s
algorithm 1 read literally; one uniform per draft drawn with torch.rand(1) in turn (the same numbers
as one torch.rand(k)), all of them before the decision loop, so the multinomial sees the same state."""

import torch


def speculative_accept(draft_tokens, draft_probs, target_probs, generator):
    k = len(draft_tokens)
    if draft_tokens.ndim != 1:
        raise ValueError("draft_tokens must be 1-D")
    if tuple(draft_probs.shape[:1]) != (k,) or draft_probs.ndim != 2:
        raise ValueError("draft_probs must have one row per draft")
    V = draft_probs.shape[-1]
    if target_probs.ndim != 2 or tuple(target_probs.shape) != (k + 1, V):
        raise ValueError("target_probs must have k + 1 rows of the same V")
    xs = [int(x) for x in draft_tokens]
    qs = [draft_probs[i].double() for i in range(k)]
    ps = [target_probs[i].double() for i in range(k + 1)]
    for i, x in enumerate(xs):
        if qs[i][x].item() == 0.0:
            raise ValueError(f"draft {i} has probability 0 under its draft distribution")

    uniforms = [torch.rand(1, generator=generator, dtype=torch.float64).item() for _ in range(k)]
    out = []
    for i, x in enumerate(xs):
        if uniforms[i] <= ps[i][x].item() / qs[i][x].item():
            out.append(x)
            continue
        weights = torch.where(ps[i] > qs[i], ps[i] - qs[i], torch.zeros_like(ps[i]))
        out.append(int(torch.multinomial(weights, 1, generator=generator).item()))
        return out
    out.append(int(torch.multinomial(ps[k], 1, generator=generator).item()))
    return out

"""A variant of speculative_decoding in another style: a Python loop over the drafts, u drawn as
k calls of torch.rand(1) (the same numbers as one torch.rand(k)), the residual's mass found with
torch.where, and the last token drawn from an unnormalized weight row (multinomial normalizes)."""

import torch
from torch import Tensor


def speculative_accept(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor,
                       generator: torch.Generator) -> list[int]:
    shape_ok = draft_tokens.ndim == 1 and target_probs.ndim == 2
    k = draft_tokens.shape[0] if draft_tokens.ndim == 1 else -1
    if not shape_ok or target_probs.shape[0] != k + 1 or tuple(draft_probs.shape) != (k, target_probs.shape[1]):
        raise ValueError("expected draft_tokens [k], draft_probs [k, V], target_probs [k + 1, V]")
    vocab = target_probs.shape[1]
    drafts = [int(t) for t in draft_tokens]
    if any(t < 0 or t >= vocab for t in drafts):
        raise ValueError("a draft token lies outside the vocabulary")
    q = draft_probs.to(torch.float64)
    p = target_probs.to(torch.float64)
    if any(q[i, t].item() == 0.0 for i, t in enumerate(drafts)):
        raise ValueError("a draft token has probability 0 under its draft distribution")

    draws = [torch.rand(1, generator=generator, dtype=torch.float64).item() for _ in drafts]
    kept = []
    for i, t in enumerate(drafts):
        if draws[i] > p[i, t].item() / q[i, t].item():
            weights = torch.where(p[i] > q[i], p[i] - q[i], torch.zeros_like(p[i]))
            break
        kept.append(t)
    else:
        weights = p[len(drafts)]
    last = torch.multinomial(weights, 1, generator=generator).item()
    return kept + [int(last)]

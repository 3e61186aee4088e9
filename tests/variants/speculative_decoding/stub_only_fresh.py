"""Speculative decoding's accept/reject step (Leviathan et al. 2023; Chen et al. 2023).

Written from the stub's docstring alone: verify k draft tokens against the target model,
keep the leading accepted ones, then add one token (from the residual after a rejection,
or the bonus from p_k when every draft was accepted).
"""

import torch
from torch import Tensor


def _validate(draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor) -> tuple[int, int]:
    """Check shapes and draft tokens; raise ValueError before any random number is drawn."""
    if draft_tokens.dim() != 1:
        raise ValueError(f"draft_tokens must be 1-D [k], got shape {tuple(draft_tokens.shape)}")
    k = draft_tokens.shape[0]
    if target_probs.dim() != 2 or target_probs.shape[0] != k + 1:
        raise ValueError(f"target_probs must be [k + 1, V] = [{k + 1}, V], got {tuple(target_probs.shape)}")
    vocab = target_probs.shape[1]
    if draft_probs.dim() != 2 or tuple(draft_probs.shape) != (k, vocab):
        raise ValueError(f"draft_probs must be [k, V] = [{k}, {vocab}], got {tuple(draft_probs.shape)}")
    if k == 0:
        return k, vocab
    if draft_tokens.dtype.is_floating_point or draft_tokens.dtype.is_complex or draft_tokens.dtype == torch.bool:
        raise ValueError(f"draft_tokens must hold integer token ids, got {draft_tokens.dtype}")
    if bool(((draft_tokens < 0) | (draft_tokens >= vocab)).any()):
        raise ValueError(f"draft_tokens must lie in [0, {vocab}), got {draft_tokens.tolist()}")
    q_of_x = draft_probs.gather(1, draft_tokens.long().to(draft_probs.device).unsqueeze(1)).squeeze(1)
    impossible = (q_of_x == 0).nonzero().flatten()
    if impossible.numel() > 0:
        i = int(impossible[0])
        raise ValueError(f"draft {i} (token {int(draft_tokens[i])}) has q_{i}[x_{i}] == 0: it could not have been drawn")
    return k, vocab


def speculative_accept(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator
) -> list[int]:
    """Verify k draft tokens against the target model: keep the leading accepted ones, add one token.

    draft_tokens long [k], draft_probs [k, V] (row i = q_i), target_probs [k + 1, V] (row i = p_i).
    Random numbers come from `generator` only, in this order: one torch.rand(k) (skipped when
    k = 0), then one torch.multinomial. Returns the n accepted drafts, then one more token.
    """
    k, _ = _validate(draft_tokens, draft_probs, target_probs)
    device = target_probs.device

    # Everything in float64, on fresh tensors (the inputs are never modified).
    p = target_probs.to(dtype=torch.float64)
    q = draft_probs.to(device=device, dtype=torch.float64)
    x = draft_tokens.to(device=device, dtype=torch.long)

    n = 0
    if k > 0:
        u = torch.rand(k, generator=generator, dtype=torch.float64, device=device)
        idx = x.unsqueeze(1)
        p_x = p[:k].gather(1, idx).squeeze(1)
        q_x = q.gather(1, idx).squeeze(1)
        accepted = u <= p_x / q_x
        # Length of the leading run of acceptances: everything after the first rejection is dropped.
        n = int(torch.cumprod(accepted.to(torch.int64), dim=0).sum())

    if n < k:
        residual = (p[n] - q[n]).clamp(min=0.0)
        dist = residual / residual.sum()
    else:
        dist = p[k]

    last = torch.multinomial(dist, 1, generator=generator)
    return x[:n].tolist() + [int(last)]

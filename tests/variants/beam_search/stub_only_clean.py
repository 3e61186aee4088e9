"""Beam search for one prompt, following transformers' vectorized `_beam_search` (>= 4.50)."""

from collections.abc import Callable

import torch
from torch import Tensor

_DEAD = -1e9  # HF's score for the K - 1 empty slots at the start


def _validate(prompt: Tensor, num_beams: int, max_new_tokens: int, early_stopping) -> None:
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (early_stopping is True or early_stopping is False
            or (isinstance(early_stopping, str) and early_stopping == "never")):
        raise ValueError(f'early_stopping must be True, False or "never", got {early_stopping!r}')
    if not isinstance(prompt, Tensor) or prompt.dim() != 1 or prompt.numel() < 1:
        raise ValueError("prompt must be a 1-D tensor with at least one token")


def beam_search(
    step_logprobs: Callable[[Tensor], Tensor],
    prompt: Tensor,
    *,
    num_beams: int,
    max_new_tokens: int,
    eos_token_id: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = True,
) -> tuple[list[list[int]], list[float]]:
    """Beam search over `step_logprobs`, as transformers' `_beam_search`; see the kata's stub."""
    _validate(prompt, num_beams, max_new_tokens, early_stopping)
    K = num_beams
    P = prompt.numel()

    # K running slots: every slot holds the prompt, only slot 0 is alive.
    seqs = prompt.detach().long().unsqueeze(0).repeat(K, 1)  # [K, P] (a copy)
    running = torch.full((K,), _DEAD, dtype=torch.float64, device=seqs.device)
    running[0] = 0.0

    finished: list[tuple[float, list[int]]] = []  # (normalized score, generated tokens), best first

    for t in range(max_new_tokens):
        logp = step_logprobs(seqs).to(torch.float64)  # [K, V]
        V = logp.shape[-1]
        cand = (running[:, None] + logp).reshape(-1)  # [K * V], index b * V + v
        n_keep = min(2 * K, cand.numel())
        top_scores, top_idx = torch.topk(cand, n_keep)
        beam_idx = top_idx // V
        tokens = top_idx % V
        last_step = t == max_new_tokens - 1
        ends = torch.ones_like(tokens, dtype=torch.bool) if last_step else tokens == eos_token_id

        # finished: only ending candidates among the first K may finish.
        norm = float(t + 1) ** length_penalty
        for r in range(min(K, n_keep)):
            if ends[r]:
                hyp = seqs[beam_idx[r], P:].tolist() + [int(tokens[r])]
                finished.append((float(top_scores[r]) / norm, hyp))
        finished.sort(key=lambda item: item[0], reverse=True)
        del finished[K:]

        if last_step:
            break

        # running: the best K candidates that did not end (topk output is sorted already).
        keep = (~ends).nonzero().squeeze(-1)[:K]
        seqs = torch.cat([seqs[beam_idx[keep]], tokens[keep, None]], dim=1)
        running = top_scores[keep]

        # stopping rules
        if len(finished) == K:
            if early_stopping is True:
                break
            if early_stopping == "never" and length_penalty > 0:
                L = max_new_tokens
            else:
                L = t + 1
            best_possible = float(running[0]) / float(L) ** length_penalty
            if best_possible <= finished[-1][0]:
                break

    return [hyp for _, hyp in finished], [score for score, _ in finished]

"""Kata【投机解码：接受/拒绝一步】: speculative decoding's accept/reject step (Leviathan et al. 2023; Chen et al. 2023), as Hugging Face's `_speculative_sampling`."""

import torch
from torch import Tensor


def speculative_accept(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator
) -> list[int]:
    """Verify k draft tokens against the target model: keep the leading accepted ones, add one token.

    A small draft model proposed x_0 ... x_{k-1}, drawing x_i from its distribution q_i; the
    target model then scored every prefix at once, giving p_0 ... p_k (p_k: after all k
    drafts). This step decides which drafts to keep so that the tokens emitted are
    distributed exactly as if drawn from the target model alone.

        draft_tokens:  long [k] (k >= 0): x_0 ... x_{k-1}.
        draft_probs:   [k, V], row i = q_i, the draft distribution that drew x_i.
        target_probs:  [k + 1, V], row i = p_i, the target distribution at the same prefix
                       as q_i; the last row p_k is the one after all k drafts.
        generator:     a torch.Generator, the ONLY source of randomness.

    The step (algorithm 1 of Leviathan et al.; HF `_speculative_sampling`), all in float64
    whatever the dtype of the probabilities:
    1. u = torch.rand(k, generator=generator, dtype=torch.float64): one uniform per draft,
       drawn at once (skip the call when k = 0; k calls of torch.rand(1, ...) give the
       same numbers and are fine).
    2. Draft i is accepted iff u[i] <= p_i[x_i] / q_i[x_i]. n = the number of LEADING
       accepted drafts: everything after the first rejection is discarded, accepted or not.
    3. One more token, from exactly one torch.multinomial(dist, 1, generator=generator):
       - n < k (draft n was rejected): dist = the residual max(0, p_n - q_n), normalized
         (it sums to > 0 whenever a draft can be rejected);
       - n == k (every draft accepted): dist = p_k, the bonus token.

    Random numbers are drawn in exactly this order, from `generator` only: the rand of
    step 1, then one multinomial. The tests compare the tokens with a float64 reference
    run on a generator with the same seed, token for token, and check the generator's
    state afterwards: draw nothing else.

    Returns:
        n + 1 ints: the n accepted drafts x_0 ... x_{n-1}, then the token of step 3.

    Theorem (why it works): the first token returned is distributed exactly as p_0, since
    min(p, q) + (1 - sum(min(p, q))) * residual = p; the tests check it by frequency.

    Conventions (judged apart from the math, as production code would need them):
        - ValueError, checked for every draft before any random number is drawn (the
          generator is left as it was): draft_tokens is not 1-D, draft_probs is not
          [k, V] or target_probs not [k + 1, V]; a draft whose q_i[x_i] == 0 (it could
          not have been drawn).
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the inputs are never changed in place.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> q = torch.tensor([[0.5, 0.5, 0.0]]); p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        >>> speculative_accept(torch.tensor([0]), q, p, g)  # p_0[0] = 0: rejected; residual = [0, 1, 0]
        [1]
    """
    ### BEGIN SOLUTION
    # TODO: check the shapes and that every q_i[x_i] > 0, before drawing anything (ValueError).
    if draft_tokens.dim() != 1:
        raise ValueError(f"draft_tokens must be 1-D [k], got shape {list(draft_tokens.shape)}")
    k = draft_tokens.size(0)
    if draft_probs.dim() != 2 or draft_probs.size(0) != k:
        raise ValueError(f"draft_probs must be [k={k}, V], got shape {list(draft_probs.shape)}")
    V = draft_probs.size(1)
    if tuple(target_probs.shape) != (k + 1, V):
        raise ValueError(f"target_probs must be [k + 1={k + 1}, V={V}], got shape {list(target_probs.shape)}")
    q = draft_probs.to(torch.float64)  # (k, V)
    p = target_probs.to(torch.float64)  # (k+1, V)
    rows = torch.arange(k, device=q.device)
    q_x = q[rows, draft_tokens]  # (k,) q_i[x_i]
    p_x = p[rows, draft_tokens]  # (k,) p_i[x_i]
    if (q_x == 0).any():
        raise ValueError("a draft token has probability 0 under its draft distribution q_i")
    # TODO: one uniform per draft, all at once; accept while u <= p/q, keep the leading run.
    n = 0
    if k > 0:
        u = torch.rand(k, generator=generator, dtype=torch.float64, device=q.device)  # (k,)
        accepted = u <= p_x / q_x  # (k,) bool
        n = int(accepted.long().cumprod(0).sum())  # the leading accepts: the first rejection ends the run
    # TODO: one more token: from the residual max(0, p_n - q_n) after a rejection, else the bonus from p_k.
    if n < k:
        residual = (p[n] - q[n]).clamp(min=0)  # (V,) where p has more mass than q
        dist = residual / residual.sum()
    else:
        dist = p[k]  # (V,) every draft accepted: a free token from the target
    token = torch.multinomial(dist, 1, generator=generator)  # (1,)
    return draft_tokens[:n].tolist() + [int(token)]
    ### END SOLUTION

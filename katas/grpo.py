"""Kata【GRPO：组内相对优势与带 KL 惩罚的裁剪策略损失】: GRPO (group relative policy optimisation): group-normalised advantages and the clipped policy loss with a KL penalty."""

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, group_size: int, eps: float = 1e-4) -> Tensor:
    """Return GRPO's advantages: each reward normalised within its own group.

    GRPO samples G = group_size completions per prompt and scores each with a reward.
    rewards [N * G] (1-D) holds them GROUPED CONSECUTIVELY: rewards[0:G] are the G
    completions of prompt 0, rewards[G:2G] those of prompt 1, and so on (N prompts).

        advantage[i] = (rewards[i] - the mean of its group) / (the std of its group + eps)

    - std: the UNBIASED standard deviation of the G rewards of the group (divided by
      G - 1), as torch.std computes it by default.
    - eps is added to the std, OUTSIDE the square root: a group whose rewards are all
      equal (std 0, e.g. every completion right, or every one wrong) gives advantages 0,
      never NaN.
    - returns [N * G] in rewards' dtype (float32 or float64 rewards).
    - rewards carry no gradient here (the gradient is not judged); print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - raise ValueError when group_size < 2 (a group of one has no unbiased std) and
          when len(rewards) is not a multiple of group_size.
        - the advantages are on rewards' device.
        - rewards is never modified.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example (N = 2 prompts, G = 3):
        >>> group_advantages(torch.tensor([1.0, 0.0, 0.0, 3.0, 3.0, 3.0]), 3)
        tensor([ 1.1545, -0.5773, -0.5773,  0.0000,  0.0000,  0.0000])
    """
    # TODO: validate: at least two completions per group, and whole groups only.
    # TODO: one row per prompt: (N * G,) -> (N, G), consecutive rewards in the same row.
    # TODO: each group's mean and unbiased std; eps added to the std, outside the sqrt.
    raise NotImplementedError


def grpo_loss(
    logps: Tensor,
    old_logps: Tensor,
    ref_logps: Tensor | None,
    advantages: Tensor,
    completion_mask: Tensor,
    clip_eps: float = 0.2,
    beta: float = 0.04,
) -> Tensor:
    """Return GRPO's loss (to minimise) for B completions padded to T tokens.

    Per token, [B, T] (the B = N * G completions of group_advantages, in the same order):
        logps           the log-probability of each completion token under the policy
                        being trained (it requires grad: the loss is differentiated
                        with respect to it)
        old_logps       the same under the policy that sampled the completions
        ref_logps       the same under the frozen reference model; may be None when
                        beta == 0
        completion_mask 1 (True) on a completion's tokens, 0 (False) on padding: a float
                        tensor of 0.0 and 1.0, or a bool tensor. Rows have different
                        lengths, any row may be entirely 0, and padded positions hold
                        ordinary finite log-probabilities that must not count.
    Per completion, [B]:
        advantages      one per completion (from group_advantages), shared by all its
                        tokens: advantages[b] goes with row b.

    The loss, per token (A = advantages of the token's row):
        ratio  = exp(logps - old_logps)
        policy = -min(ratio * A, clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)
        kl     = exp(ref_logps - logps) - (ref_logps - logps) - 1   (never negative)
        token  = policy + beta * kl
    per completion, the mask-weighted mean over its own tokens:
        row    = sum over t of mask * token / max(sum over t of mask, 1)
                 (the count clamped at 1: an empty row gives 0, never 0 / 0)
    and the result is the mean of row over the B completions, empty rows included (the
    GRPO paper's normalisation, as TRL's "grpo" loss type): a 0-d tensor.

    - beta == 0 switches the KL term off entirely: ref_logps may then be None (no
      reference model).
    - dtypes: logps, old_logps, ref_logps and advantages are all float32 or all float64;
      the loss has logps' dtype.
    - gradients flow to logps as autograd through the formula above does: take min and
      clamp as they are (outside the clip range the clipped side carries no gradient);
      old_logps, ref_logps and advantages are given constants. Print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - an empty row (a completion whose mask is all 0) gives 0, never 0 / 0, and still
          counts in the mean over the B completions.
        - with beta == 0, ref_logps is not read at all: it may hold anything, -inf included
          (0 * inf would be NaN).
        - the loss is on logps' device.
        - the inputs are never modified (logps requiring grad included).
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example (B = 2, T = 3; the second row is empty):
        >>> logps = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0]])
        >>> mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
        >>> grpo_loss(logps, logps - 0.5, logps, torch.tensor([1.0, -1.0]), mask)
        tensor(-0.6000)
    """
    # TODO: the probability ratio of each token, new policy over old: exp of the log difference.
    # TODO: each completion's advantage applies to every token of its row: (B,) -> (B, 1).
    # TODO: the pessimistic (clipped) objective: the min of the unclipped and the clipped
    # TODO: terms, negated to make a loss.
    # TODO: the KL penalty to the reference (the k3 estimator), only when beta != 0.
    # TODO: the masked mean of each row over its own tokens (count clamped at 1), then the
    # TODO: mean over the B rows.
    raise NotImplementedError

"""Kata【PPO：广义优势估计（GAE）与裁剪代理损失】: PPO's maths: generalised advantage estimation (GAE) and the clipped surrogate loss."""

import torch
from torch import Tensor


def gae(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    last_value: Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[Tensor, Tensor]:
    """Return (advantages, returns) of a rollout by generalised advantage estimation (GAE).

    Shapes (B rollouts side by side, T steps each, time along dim 1):
        rewards [B, T]     r_t, the reward received after step t
        values [B, T]      V_t, the critic's value of the state at step t
        dones [B, T]       done_t: True (or 1.0) when the episode ENDED AFTER step t, so the
                           state at t + 1 starts a new episode; bool, or 0/1 floats
        last_value [B]     V_T, the value of the state after the last step (the bootstrap)
        advantages [B, T], returns [B, T]

    Backwards over t, from t = T - 1 down to 0, with V_T = last_value and A_T = 0:
        delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
        returns = A + V                       (the critic's targets)
    (1 - done_t) stops both the bootstrap and the sum at an episode's end: episodes end
    anywhere, several times in a row, at t = 0 and at t = T - 1 included (then last_value is
    not used for that row). gamma = 1, lam = 1 and lam = 0 are legal (lam = 0 gives A = delta).

    rewards, values and last_value share one float dtype; dones is bool or that float
    dtype. Both results are in that dtype; float32 is computed in float32. Print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - no graph: advantages and returns are targets, not something to differentiate
          through. Even when rewards, values or last_value require grad, both results must
          have requires_grad False (compute them under torch.no_grad(), or detach).
        - both results are on the inputs' device.
        - float16 and bfloat16 inputs are computed in float32 and the results cast back to
          their dtype.
        - the inputs are never modified.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> rewards = torch.tensor([[1.0, 1.0, 1.0]]); values = torch.tensor([[0.5, 0.5, 0.5]])
        >>> dones = torch.tensor([[False, True, False]])
        >>> advantages, returns = gae(rewards, values, dones, torch.tensor([2.0]), gamma=1.0, lam=1.0)
        >>> advantages, returns
        (tensor([[1.5000, 0.5000, 2.5000]]), tensor([[2., 1., 3.]]))
    """
    # TODO: record no graph: detach the inputs (or work under torch.no_grad()).
    # TODO: the computation dtype: float32 for float16 and bfloat16, the input's own otherwise.
    # TODO: (1 - done_t) as numbers (dones may be bool): 0 where the episode ended after step t.
    # TODO: walk backwards from t = T - 1, carrying V_{t+1} (last_value first) and A_{t+1} (0 first).
    # TODO: returns = A + V; both results in the inputs' dtype.
    raise NotImplementedError


def ppo_clip_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    value_clip_eps: float = 0.2,
    value_coef: float = 0.5,
) -> tuple[Tensor, Tensor, Tensor]:
    """Return (total, policy_loss, value_loss), PPO's clipped losses, each a 0-d tensor.

    Every input is [B, T] (one entry per token or step):
        logps        log pi(a_t | s_t) under the policy being trained (gradients flow here)
        old_logps    the same under the policy that collected the data
        advantages   A_t (from gae, say)
        values       V(s_t) under the critic being trained (gradients flow here)
        old_values   V(s_t) under the critic that collected the data
        returns      R_t, the critic's targets (gae's returns)
        mask         1 (True) for an entry that counts, 0 (False) for padding; bool, or 0/1
                     floats in the inputs' dtype

    mask-mean(x) = sum(mask * x) / sum(mask), over the WHOLE batch at once (every counted
    token weighs the same; not a mean per row, then over rows). A row may be all padding.

        ratio        = exp(logps - old_logps)
        policy_loss  = mask-mean( -min(ratio * A, clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A) )
        V_clipped    = old_values + clamp(values - old_values, -value_clip_eps, value_clip_eps)
        value_loss   = 1/2 * mask-mean( max((values - returns)^2, (V_clipped - returns)^2) )
        total        = policy_loss + value_coef * value_loss

    - gradients reach logps and values as autograd through this formula gives them (the
      other inputs are constants: they may be detached or not). Ratios lie on both sides
      of the clip range, with advantages of both signs, and values lie far from
      old_values on both sides: the min, the clamps and the max all matter.
    - an all-zero mask makes every mask-mean 0 / 0: not judged (TRL's masked_mean gives
      NaN there).
    - every float input shares one dtype; the three results are in it; float32 is
      computed in float32. Print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - the three results are on the inputs' device.
        - float16 and bfloat16 inputs are computed in float32 and the results cast back to
          their dtype.
        - the inputs are never modified.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> ones = torch.ones(1, 2)
        >>> total, policy_loss, value_loss = ppo_clip_loss(
        ...     torch.log(torch.tensor([[1.5, 0.5]])), 0 * ones, torch.tensor([[1.0, -1.0]]),
        ...     torch.tensor([[1.0, 0.0]]), 0 * ones, torch.tensor([[2.0, 0.0]]), ones)
        >>> policy_loss, value_loss, total
        (tensor(-0.2000), tensor(0.8100), tensor(0.2050))
    """
    # TODO: the computation dtype: float32 for float16 and bfloat16, the input's own otherwise.
    # TODO: the mask-mean: one sum over every counted entry of the batch, divided by their number.
    # TODO: the policy's clipped surrogate: the min of the unclipped and clipped terms, negated.
    # TODO: the value loss: the max of the plain and the clipped squared errors, halved.
    # TODO: the total, and every result in the inputs' dtype.
    raise NotImplementedError

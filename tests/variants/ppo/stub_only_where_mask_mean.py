"""Variant of ppo, written from the stub alone: torch.where mask-means, ValueError on shape mismatches."""

import torch
from torch import Tensor

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are upcast to float32; every other float dtype is kept as is."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


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

    Conventions:
        - no graph: advantages and returns are targets, not something to differentiate
          through. Even when rewards, values or last_value require grad, both results must
          have requires_grad False (compute them under torch.no_grad(), or detach).
        - rewards, values and last_value share one float dtype; dones is bool or that float
          dtype. Both results are in that dtype, on the inputs' device. float16 and bfloat16
          are computed in float32 and cast back; float32 and float64 in their own dtype
          (float64 never through float32).
        - do not modify the inputs; print nothing.

    Example:
        >>> rewards = torch.tensor([[1.0, 1.0, 1.0]]); values = torch.tensor([[0.5, 0.5, 0.5]])
        >>> dones = torch.tensor([[False, True, False]])
        >>> advantages, returns = gae(rewards, values, dones, torch.tensor([2.0]), gamma=1.0, lam=1.0)
        >>> advantages, returns
        (tensor([[1.5000, 0.5000, 2.5000]]), tensor([[2., 1., 3.]]))
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, T], got shape {tuple(rewards.shape)}")
    if values.shape != rewards.shape or dones.shape != rewards.shape:
        raise ValueError(
            f"rewards, values and dones must share one shape [B, T], got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(dones.shape)}"
        )
    if last_value.shape != rewards.shape[:1]:
        raise ValueError(
            f"last_value must be [B] = {tuple(rewards.shape[:1])}, got {tuple(last_value.shape)}"
        )

    out_dtype = rewards.dtype
    work = _compute_dtype(out_dtype)

    with torch.no_grad():
        r = rewards.detach().to(work)
        v = values.detach().to(work)
        v_next = last_value.detach().to(work)
        if dones.dtype == torch.bool:
            alive = (~dones).to(work)
        else:
            alive = 1.0 - dones.detach().to(work)

        T = r.shape[1]
        adv = torch.empty_like(r)  # fresh buffer: inputs are never written to
        a_next = torch.zeros_like(v_next)
        for t in range(T - 1, -1, -1):
            keep = alive[:, t]
            delta = r[:, t] + gamma * v_next * keep - v[:, t]
            a_next = delta + (gamma * lam) * keep * a_next
            adv[:, t] = a_next
            v_next = v[:, t]
        ret = adv + v

    return adv.to(out_dtype), ret.to(out_dtype)


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

    Conventions:
        - gradients reach logps and values as autograd through this formula gives them (the
          other inputs are constants: they may be detached or not). Ratios lie on both sides
          of the clip range, with advantages of both signs, and values lie far from
          old_values on both sides: the min, the clamps and the max all matter.
        - an all-zero mask makes every mask-mean 0 / 0: not judged (TRL's masked_mean gives
          NaN there).
        - every float input shares one dtype; the three results are in it, on the inputs'
          device. float16 and bfloat16 are computed in float32 and cast back; float32 and
          float64 in their own dtype (float64 never through float32).
        - do not modify the inputs; print nothing.

    Example:
        >>> ones = torch.ones(1, 2)
        >>> total, policy_loss, value_loss = ppo_clip_loss(
        ...     torch.log(torch.tensor([[1.5, 0.5]])), 0 * ones, torch.tensor([[1.0, -1.0]]),
        ...     torch.tensor([[1.0, 0.0]]), 0 * ones, torch.tensor([[2.0, 0.0]]), ones)
        >>> policy_loss, value_loss, total
        (tensor(-0.2000), tensor(0.8100), tensor(0.2050))
    """
    shape = logps.shape
    for name, x in (
        ("old_logps", old_logps),
        ("advantages", advantages),
        ("values", values),
        ("old_values", old_values),
        ("returns", returns),
        ("mask", mask),
    ):
        if x.shape != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")

    out_dtype = logps.dtype
    work = _compute_dtype(out_dtype)

    # Only logps and values carry gradients; the rest are constants.
    lp = logps.to(work)
    v = values.to(work)
    old_lp = old_logps.detach().to(work)
    adv = advantages.detach().to(work)
    old_v = old_values.detach().to(work)
    ret = returns.detach().to(work)
    keep = mask.detach() if mask.dtype == torch.bool else mask.detach() != 0
    n_kept = keep.to(work).sum()

    def masked_mean(x: Tensor) -> Tensor:
        # torch.where (not mask * x) so that padding holding inf/nan cannot leak in.
        return torch.where(keep, x, torch.zeros_like(x)).sum() / n_kept

    ratio = torch.exp(lp - old_lp)
    surrogate = ratio * adv
    surrogate_clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    policy_loss = masked_mean(-torch.minimum(surrogate, surrogate_clipped))

    v_clipped = old_v + torch.clamp(v - old_v, -value_clip_eps, value_clip_eps)
    err = (v - ret).square()
    err_clipped = (v_clipped - ret).square()
    value_loss = 0.5 * masked_mean(torch.maximum(err, err_clipped))

    total = policy_loss + value_coef * value_loss
    return total.to(out_dtype), policy_loss.to(out_dtype), value_loss.to(out_dtype)

"""Variant of ppo, GAE as one discount matrix per row (no loop over t), masks as boolean indices."""

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
    dtype = rewards.dtype
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    r, v = rewards.detach().to(compute), values.detach().to(compute)  # (B, T)
    ended = dones.detach().to(compute)  # (B, T)
    T = r.size(1)
    next_values = torch.cat([v[:, 1:], last_value.detach().to(compute)[:, None]], dim=1)  # (B, T)
    deltas = r + gamma * next_values * (1 - ended) - v  # (B, T)
    # A_t = sum over k >= t of (gamma lam)^(k - t) delta_k, as long as no episode ends in t..k-1
    ends_before = torch.cumsum(ended, dim=1) - ended  # (B, T): episode ends strictly before k
    same_episode = ends_before[:, None, :] == ends_before[:, :, None]  # (B, t, k)
    steps = torch.arange(T, device=r.device)
    offset = steps[None, :] - steps[:, None]  # (t, k): k - t
    ahead = offset >= 0
    discount = torch.full((T, T), gamma * lam, dtype=compute, device=r.device).pow(offset.clamp(min=0).to(compute))
    weight = torch.where(ahead & same_episode, discount, torch.zeros((), dtype=compute, device=r.device))
    advantages = torch.einsum("btk,bk->bt", weight, deltas)  # (B, T)
    advantages = advantages.to(dtype)
    return advantages, advantages + values.detach()  # the returns formed in the inputs' dtype


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
    dtype = logps.dtype
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    keep = mask != 0  # bool either way

    def counted(t: Tensor) -> Tensor:
        return t[keep].to(compute)  # (N,): the counted entries of the whole batch

    lp, old_lp, adv = counted(logps), counted(old_logps), counted(advantages)
    v, old_v, ret = counted(values), counted(old_values), counted(returns)
    ratio = (lp - old_lp).exp()
    policy_loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip_eps, 1 + clip_eps)).mean()
    v_clipped = torch.clamp(v, old_v - value_clip_eps, old_v + value_clip_eps)
    value_loss = 0.5 * torch.maximum((v - ret).square(), (v_clipped - ret).square()).mean()
    total = policy_loss + value_coef * value_loss
    return total.to(dtype), policy_loss.to(dtype), value_loss.to(dtype)

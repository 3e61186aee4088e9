"""Variant of grpo, written from the stub alone: masked log-differences before exp, torch.where row means."""

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, group_size: int, eps: float = 1e-4) -> Tensor:
    """Return GRPO's advantages: each reward normalised within its own group.

    rewards [N * G] holds the G rewards of each prompt consecutively.
    advantage[i] = (rewards[i] - group mean) / (unbiased group std + eps).
    Returns [N * G] in rewards' dtype and on its device. Raises ValueError when
    group_size < 2 or when len(rewards) is not a multiple of group_size.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2, got {group_size}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D, got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    if n % group_size != 0:
        raise ValueError(
            f"len(rewards) = {n} is not a multiple of group_size = {group_size}"
        )

    grouped = rewards.reshape(n // group_size, group_size)       # (N, G), one row per prompt
    mean = grouped.mean(dim=1, keepdim=True)                      # (N, 1)
    std = grouped.std(dim=1, unbiased=True, keepdim=True)         # (N, 1), divides by G - 1
    advantages = (grouped - mean) / (std + eps)
    return advantages.reshape(n)


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

    Per token: clipped surrogate policy loss plus beta times the k3 KL estimate to the
    reference; per completion: masked mean over its own tokens (count clamped at 1);
    result: mean over the B completions (empty ones included), a 0-d tensor in logps'
    dtype and on its device. beta == 0 never reads ref_logps.
    """
    if logps.dim() != 2:
        raise ValueError(f"logps must be [B, T], got shape {tuple(logps.shape)}")
    shape = logps.shape
    if old_logps.shape != shape:
        raise ValueError(f"old_logps shape {tuple(old_logps.shape)} != logps shape {tuple(shape)}")
    if completion_mask.shape != shape:
        raise ValueError(
            f"completion_mask shape {tuple(completion_mask.shape)} != logps shape {tuple(shape)}"
        )
    if advantages.shape != shape[:1]:
        raise ValueError(
            f"advantages must be [B] = [{shape[0]}], got shape {tuple(advantages.shape)}"
        )
    use_kl = beta != 0
    if use_kl:
        if ref_logps is None:
            raise ValueError("ref_logps is required when beta != 0")
        if ref_logps.shape != shape:
            raise ValueError(
                f"ref_logps shape {tuple(ref_logps.shape)} != logps shape {tuple(shape)}"
            )

    keep = completion_mask.to(device=logps.device) != 0           # (B, T) bool
    zero = logps.new_zeros(())

    # Padded positions are replaced by neutral values *before* any exp, so that nothing
    # there can overflow and their gradient is exactly zero (not 0 * inf).
    log_ratio = torch.where(keep, logps - old_logps, zero)
    ratio = torch.exp(log_ratio)                                  # (B, T)

    adv = advantages.unsqueeze(1)                                 # (B, 1), shared by the row
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.min(unclipped, clipped)                    # (B, T)

    if use_kl:
        delta = torch.where(keep, ref_logps - logps, zero)        # ref over policy, in log space
        kl = torch.exp(delta) - delta - 1.0                       # k3 estimator, >= 0
        per_token = per_token + beta * kl

    weights = keep.to(logps.dtype)
    per_token = torch.where(keep, per_token, zero)
    counts = weights.sum(dim=1).clamp(min=1.0)                    # (B,), empty row -> 1
    per_row = per_token.sum(dim=1) / counts                       # (B,)
    return per_row.mean()

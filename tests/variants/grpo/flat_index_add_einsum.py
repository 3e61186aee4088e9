"""Variant of grpo, no reshape into groups: per-group sums with index_add by group id, broadcast back by indexing; the loss with torch.where and einsum row sums."""

import torch


def group_advantages(rewards, group_size, eps=1e-4):
    n = rewards.shape[0]
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    if n % group_size != 0:
        raise ValueError(f"len(rewards) = {n} is not a multiple of group_size = {group_size}")
    groups = n // group_size
    gid = torch.arange(n, device=rewards.device) // group_size
    sums = torch.zeros(groups, dtype=rewards.dtype, device=rewards.device).index_add(0, gid, rewards)
    mean = (sums / group_size)[gid]
    dev = rewards - mean
    sq = torch.zeros(groups, dtype=rewards.dtype, device=rewards.device).index_add(0, gid, dev * dev)
    std = (sq / (group_size - 1)).sqrt()[gid]
    return dev / (std + eps)


def grpo_loss(logps, old_logps, ref_logps, advantages, completion_mask, clip_eps=0.2, beta=0.04):
    log_ratio = logps - old_logps
    ratio = log_ratio.exp()
    adv = advantages[:, None].expand_as(ratio)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    loss = -surrogate
    if beta != 0.0:
        d = ref_logps - logps
        loss = loss + beta * (torch.exp(d) - d - 1.0)
    m = completion_mask
    if m.dtype == torch.bool:
        m = m.to(loss.dtype)
    per_seq = torch.einsum("bt,bt->b", loss, m) / m.sum(-1).clamp(min=1.0)
    return per_seq.sum() / per_seq.shape[0]

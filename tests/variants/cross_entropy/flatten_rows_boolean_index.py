"""Variant of cross_entropy, rows flattened to [positions, C], log-sum-exp as max + log(sum), ignored rows dropped by boolean indexing."""

import torch


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if reduction not in {"mean", "sum", "none"}:
        raise ValueError(f"invalid reduction {reduction!r}")
    out_dtype = input.dtype
    x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
    C = x.shape[0] if x.dim() == 1 else x.shape[1]
    rows = x.reshape(1, C) if x.dim() == 1 else x.movedim(1, -1).reshape(-1, C)  # one row per position
    labels = target.reshape(-1)
    valid = labels != ignore_index
    picked_rows = rows[valid]
    picked_labels = labels[valid]
    m = picked_rows.max(dim=-1).values
    lse = m + torch.log(torch.exp(picked_rows - m[:, None]).sum(dim=-1))
    target_logit = picked_rows[torch.arange(picked_rows.shape[0], device=rows.device), picked_labels]
    loss = lse - target_logit
    if label_smoothing:
        loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - picked_rows.mean(dim=-1))
    if reduction == "none":
        full = rows.new_zeros(labels.shape)
        full[valid] = loss
        return full.reshape(target.shape).to(out_dtype)
    if reduction == "sum":
        return loss.sum().to(out_dtype)
    return loss.mean().to(out_dtype)

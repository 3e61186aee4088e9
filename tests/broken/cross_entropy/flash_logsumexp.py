"""Broken cross_entropy: takes the log-normaliser of each row from the CPU flash attention kernel's logsumexp (one query of ones, the logits as keys, head size 1). Expected verdict: forbidden."""

import torch


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    logits = input.movedim(1, -1).double()  # [..., C]
    keys = logits.reshape(1, -1, logits.size(-1), 1)
    query = torch.ones(1, keys.size(1), 1, 1, dtype=keys.dtype)
    _, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, keys, keys, scale=1.0)[:2]
    log_probs = logits - lse.reshape(logits.shape[:-1]).unsqueeze(-1)
    keep = target != ignore_index
    picked = log_probs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    smooth = log_probs.mean(-1)
    losses = -((1 - label_smoothing) * picked + label_smoothing * smooth) * keep
    if reduction == "none":
        return losses.to(input.dtype)
    if reduction == "sum":
        return losses.sum().to(input.dtype)
    return (losses.sum() / keep.sum()).to(input.dtype)

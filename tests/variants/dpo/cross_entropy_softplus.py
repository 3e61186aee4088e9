"""Variant of dpo, F.cross_entropy(reduction="none") on the shifted logits, F.softplus, rewards under no_grad."""

import torch
import torch.nn.functional as F


def sequence_log_probs(logits, labels, ignore_index=-100):
    work = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    predicting = work[:, :-1].transpose(1, 2)  # (B, V, T - 1): the class dim of F.cross_entropy is 1
    targets = labels[:, 1:]
    nll = F.cross_entropy(predicting, targets, ignore_index=ignore_index, reduction="none")  # 0 where ignored
    return (-nll.sum(dim=1)).to(logits.dtype)


def dpo_loss(
    policy_chosen_logps,
    policy_rejected_logps,
    reference_chosen_logps,
    reference_rejected_logps,
    beta=0.1,
    label_smoothing=0.0,
):
    out_dtype = policy_chosen_logps.dtype
    up = (lambda t: t.float()) if out_dtype in (torch.float16, torch.bfloat16) else (lambda t: t)
    chosen_logratios = up(policy_chosen_logps) - up(reference_chosen_logps)
    rejected_logratios = up(policy_rejected_logps) - up(reference_rejected_logps)
    margin = beta * (chosen_logratios - rejected_logratios)
    # -logsigmoid(x) = softplus(-x)
    losses = (1 - label_smoothing) * F.softplus(-margin) + label_smoothing * F.softplus(margin)
    with torch.no_grad():
        chosen_rewards = beta * chosen_logratios
        rejected_rewards = beta * rejected_logratios
    return losses.to(out_dtype), chosen_rewards.to(out_dtype), rejected_rewards.to(out_dtype)

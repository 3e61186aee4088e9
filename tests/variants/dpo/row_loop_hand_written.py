"""Variant of dpo, a Python loop over the sequences, a hand-written log-sum-exp and a hand-written log-sigmoid."""

import torch


def sequence_log_probs(logits, labels, ignore_index=-100):
    B, T, V = logits.shape
    work = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    rows = []
    for b in range(B):
        x = logits[b, : T - 1].to(work)  # (T - 1, V): position t predicts labels[b, t + 1]
        target = labels[b, 1:]
        valid = target != ignore_index
        index = torch.where(valid, target, torch.zeros_like(target))
        m = x.max(dim=-1, keepdim=True).values.detach() if T > 1 else x.sum(dim=-1, keepdim=True)
        lse = m.squeeze(-1) + torch.log(torch.exp(x - m).sum(dim=-1))
        picked = x[torch.arange(T - 1, device=x.device), index]
        rows.append(torch.where(valid, picked - lse, torch.zeros_like(lse)).sum())
    return torch.stack(rows).to(logits.dtype)


def _log_sigmoid(x):
    # log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)): exp never overflows
    return torch.clamp(x, max=0) - torch.log1p(torch.exp(-x.abs()))


def dpo_loss(
    policy_chosen_logps,
    policy_rejected_logps,
    reference_chosen_logps,
    reference_rejected_logps,
    beta=0.1,
    label_smoothing=0.0,
):
    dtype = policy_chosen_logps.dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    pc, pr = policy_chosen_logps.to(work), policy_rejected_logps.to(work)
    rc, rr = reference_chosen_logps.to(work), reference_rejected_logps.to(work)
    x = beta * ((pc - rc) - (pr - rr))
    losses = -(1 - label_smoothing) * _log_sigmoid(x) - label_smoothing * _log_sigmoid(-x)
    chosen = beta * (pc.detach() - rc.detach())
    rejected = beta * (pr.detach() - rr.detach())
    return losses.to(dtype), chosen.to(dtype), rejected.to(dtype)

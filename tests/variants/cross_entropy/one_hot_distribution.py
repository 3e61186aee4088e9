"""Variant of cross_entropy, class dim moved last and a smoothed one-hot target distribution dotted with the log-probabilities."""

import torch


def cross_entropy(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(reduction)
    work = torch.float64 if input.dtype == torch.float64 else torch.float32
    logits = input.to(work)
    if logits.dim() == 1:
        logits, labels = logits.unsqueeze(0), target.unsqueeze(0)
    else:
        labels = target
    logits = logits.movedim(1, -1)  # (N, *d, C)
    C = logits.shape[-1]
    z = logits - logits.max(dim=-1, keepdim=True).values
    logp = z - z.exp().sum(dim=-1, keepdim=True).log()
    valid = labels != ignore_index
    classes = torch.arange(C, device=logits.device)
    one_hot = (classes == torch.where(valid, labels, 0).unsqueeze(-1)).to(work)
    q = one_hot * (1.0 - label_smoothing) + label_smoothing / C
    loss = -torch.einsum("...c,...c->...", q, logp)
    loss = torch.where(valid, loss, torch.zeros((), dtype=work, device=loss.device))
    if reduction == "none":
        return loss.reshape(target.shape).to(input.dtype)
    if reduction == "sum":
        return loss.sum().to(input.dtype)
    return (loss.sum() / valid.sum().to(work)).to(input.dtype)

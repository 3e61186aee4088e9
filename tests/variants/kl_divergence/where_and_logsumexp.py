"""Variant of kl_divergence (correct): the pointwise loss with torch.where instead of xlogy
(P log P is 0 where P is 0), the reductions spelled out, and distillation without kl_div:
its own log-sum-exp per row and sum_v p (log p - log q) averaged over the rows."""

import torch
from torch import Tensor


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    if reduction not in {"none", "sum", "mean", "batchmean"}:
        raise ValueError(f"invalid reduction {reduction!r}")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        p_log_p = torch.where(target > 0, target * target.clamp_min(torch.finfo(target.dtype).tiny).log(), 0.0)
        loss = p_log_p - target * input
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    if reduction == "mean":
        return total / loss.numel()
    return total / input.shape[0] if input.ndim else total


def _log_probs(logits: Tensor) -> Tensor:
    top = logits.amax(dim=-1, keepdim=True).detach()
    return logits - top - (logits - top).exp().sum(dim=-1, keepdim=True).log()


def distillation_loss(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0, *, direction: str = "forward"
) -> Tensor:
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if direction not in {"forward", "reverse"}:
        raise ValueError(f"direction must be forward or reverse, not {direction!r}")
    vocab = student_logits.shape[-1]
    log_q = _log_probs(student_logits.reshape(-1, vocab) / temperature)  # the student's
    with torch.no_grad():
        log_p = _log_probs(teacher_logits.reshape(-1, vocab) / temperature)  # the teacher's, a constant
    if direction == "reverse":
        log_p, log_q = log_q, log_p
    per_row = (log_p.exp() * (log_p - log_q)).sum(dim=-1)  # KL(P || Q) of each row
    return per_row.mean() * temperature**2

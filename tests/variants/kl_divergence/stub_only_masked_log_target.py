"""Variant of kl_divergence, written from the stub alone: xlogy for probability targets, a
masked difference where a log-target is -inf, distillation through its own kl_div."""

import torch
import torch.nn.functional as F
from torch import Tensor

REDUCTIONS = ("none", "sum", "mean", "batchmean")
DIRECTIONS = ("forward", "reverse")


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL(P || Q) with input = log Q and target = P (or log P when log_target=True)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {REDUCTIONS}")

    if log_target:
        p = torch.exp(target)
        # Where P == 0 (log P == -inf) the term is 0; mask the difference so that neither
        # the value nor its gradient picks up 0 * inf.
        gap = torch.where(p == 0, torch.zeros_like(target), target) - torch.where(
            p == 0, torch.zeros_like(input), input
        )
        pointwise = p * gap
    else:
        # xlogy gives 0 * log 0 = 0; a zero target also zeroes target * input for finite input.
        pointwise = torch.xlogy(target, target) - target * input

    if reduction == "none":
        return pointwise
    if reduction == "sum":
        return pointwise.sum()
    if reduction == "mean":
        return pointwise.mean()
    # "batchmean": the sum per sample, samples counted along input's first dim.
    total = pointwise.sum()
    if input.dim() == 0:
        return total
    return total / input.size(0)


def distillation_loss(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0, *, direction: str = "forward"
) -> Tensor:
    """Hinton-style distillation loss T**2 * KL, averaged over all leading positions."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; expected one of {DIRECTIONS}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student and teacher logits must share a shape, got "
            f"{tuple(student_logits.shape)} and {tuple(teacher_logits.shape)}"
        )

    vocab = student_logits.size(-1)
    log_p_student = F.log_softmax(student_logits.reshape(-1, vocab) / temperature, dim=-1)
    log_p_teacher = F.log_softmax(teacher_logits.detach().reshape(-1, vocab) / temperature, dim=-1)

    if direction == "forward":
        kl = kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)
    else:
        kl = kl_div(log_p_teacher, log_p_student, reduction="batchmean", log_target=True)
    return kl * (temperature**2)

"""Kata【KL 散度与知识蒸馏损失】: KL divergence as F.kl_div, and the distillation loss built on it."""

import torch
import torch.nn.functional as F
from torch import Tensor

REDUCTIONS = ("none", "sum", "mean", "batchmean")


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Return the KL divergence KL(P || Q) of F.kl_div(input, target, reduction, log_target):

        input:  log-probabilities log Q (the model's), any shape;
        target: probabilities P (or, with log_target=True, log-probabilities log P),
                broadcastable with input (as F.kl_div broadcasts them).

    The pointwise loss, on the broadcast shape:

        log_target=False:  target * (log(target) - input), with 0 * log(0) = 0 (torch.xlogy)
        log_target=True:   exp(target) * (target - input)

    then reduced:
        "none":       the pointwise loss itself;
        "sum":        its sum;
        "mean":       its mean over ALL its elements (PyTorch's legacy "mean", not the KL
                      of the batch: F.kl_div warns about it);
        "batchmean":  its sum divided by input.size(0), the true KL per sample (a 0-d input:
                      the sum). input.size(0) even when target broadcasts input to more rows.
    The result is a 0-d tensor for every reduction but "none".

        - A zero in the target contributes 0 (not NaN), whatever the input there. Target 0
          where input is -inf is undefined (0 * inf: PyTorch gives NaN) and not judged, and
          so is a log-target of -inf (a probability of 0 given as its log).
        - The result has the inputs' dtype (float32 or float64), on their device. Errors of
          float32 arithmetic are accepted.
        - PyTorch's KL divergence is off limits in every spelling (F.kl_div, nn.KLDivLoss,
          torch.kl_div, aten, torch.distributions.kl); torch.xlogy, log and exp are fine.

    Conventions (judged apart from the math, as production code would need them):
        - any other reduction raises ValueError.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - input and target are never changed in place.

    Example:
        >>> p = torch.tensor([[0.5, 0.5, 0.0]])
        >>> kl_div(torch.log(torch.tensor([[0.25, 0.25, 0.5]])), p, reduction="batchmean")
        tensor(0.6931)
    """
    # TODO: refuse an unknown reduction with ValueError.
    # TODO: the pointwise loss; xlogy(t, t) is t * log(t) with 0 * log(0) = 0.
    # TODO: reduce; "batchmean" divides the sum by input.size(0).
    raise NotImplementedError


def distillation_loss(
    student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0, *, direction: str = "forward"
) -> Tensor:
    """Return the knowledge-distillation loss of Hinton et al. (2015), a 0-d tensor:

        p_s = softmax(student_logits / T), p_t = softmax(teacher_logits / T), over the last dim;
        "forward":  KL(p_t || p_s) * T**2  (the student covers the teacher's mass);
        "reverse":  KL(p_s || p_t) * T**2  (mode-seeking, as in MiniLLM).

        - student_logits and teacher_logits: the same shape [..., V]; every leading dim is
          flattened, so the KL is averaged over the N = numel / V rows ("batchmean" over
          rows: over B * T positions for [B, T, V] logits, not over B).
        - T = temperature > 0; T**2 keeps the gradients' scale as T changes.
        - The teacher is a constant: no gradient may reach teacher_logits (detach it).
        - Logits up to +-1e4: take log_softmax, never log(softmax(...)) (probabilities that
          underflow to 0 give -inf logs and NaN).
        - Use your kl_div above (or the same formula); the result has the logits' dtype.

    Conventions (judged apart from the math, as production code would need them):
        - temperature <= 0 raises ValueError, and so does any other direction.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the logits are never changed in place.

    Example:
        >>> s = torch.tensor([[0.0, 0.0]]); t = torch.tensor([[0.0, 2.0]])
        >>> distillation_loss(s, t, temperature=2.0)
        tensor(0.4438)
    """
    # TODO: refuse temperature <= 0 and an unknown direction with ValueError.
    # TODO: flatten to N rows of V; log-probabilities at temperature T, the teacher detached.
    # TODO: KL(P || Q) is kl_div(log Q, log P, log_target=True): forward P = teacher, reverse P = student.
    raise NotImplementedError

"""Variant of dpo, written from the stub alone: F.log_softmax and gather, torch.where masking, no_grad rewards."""

import torch
import torch.nn.functional as F
from torch import Tensor

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precision is upcast to float32; every other dtype is kept as is."""
    return torch.float32 if dtype in _HALF_DTYPES else dtype


def sequence_log_probs(logits: Tensor, labels: Tensor, ignore_index: int = -100) -> Tensor:
    """Summed log-probability of each sequence's (shifted) labels under `logits`, [B].

    logits [B, T, V], labels [B, T]; the logits at t predict labels[:, t + 1]. Positions whose
    label equals `ignore_index` contribute nothing (and are never used as gather indices).
    Half-precision logits are computed in float32; the result has the logits' dtype.
    """
    out_dtype = logits.dtype
    work = logits.to(_compute_dtype(out_dtype))  # no-op (no copy) for float32 / float64

    # Shift: drop the last logits (they predict nothing) and the first label (never predicted).
    shifted_logits = work[:, :-1, :]          # (B, T-1, V)
    shifted_labels = labels[:, 1:]            # (B, T-1)

    keep = shifted_labels != ignore_index
    # Replace ignored labels by a valid index (0) before gathering; they are masked out below.
    safe_labels = torch.where(keep, shifted_labels, torch.zeros_like(shifted_labels)).long()

    log_probs = F.log_softmax(shifted_logits, dim=-1)                            # stable
    token_logps = log_probs.gather(-1, safe_labels.unsqueeze(-1)).squeeze(-1)    # (B, T-1)

    # where (not multiply) so that ignored positions give exactly 0 and no gradient.
    token_logps = torch.where(keep, token_logps, torch.zeros_like(token_logps))
    return token_logps.sum(dim=-1).to(out_dtype)


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    reference_chosen_logps: Tensor,
    reference_rejected_logps: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """DPO sigmoid loss (with conservative label smoothing), per pair, plus detached rewards.

    Returns (losses, chosen_rewards, rejected_rewards), each [B] in the inputs' dtype.
    Half-precision inputs are computed in float32.
    """
    out_dtype = policy_chosen_logps.dtype
    cdt = _compute_dtype(out_dtype)
    pi_c = policy_chosen_logps.to(cdt)
    pi_r = policy_rejected_logps.to(cdt)
    ref_c = reference_chosen_logps.to(cdt)
    ref_r = reference_rejected_logps.to(cdt)

    z = (pi_c - pi_r) - (ref_c - ref_r)
    scaled = beta * z
    eps = label_smoothing
    # F.logsigmoid is stable for large |x| (no log(0) = -inf, finite gradients).
    losses = -F.logsigmoid(scaled) * (1.0 - eps) - F.logsigmoid(-scaled) * eps

    with torch.no_grad():
        chosen_rewards = beta * (pi_c - ref_c)
        rejected_rewards = beta * (pi_r - ref_r)

    return (
        losses.to(out_dtype),
        chosen_rewards.to(out_dtype).detach(),
        rejected_rewards.to(out_dtype).detach(),
    )

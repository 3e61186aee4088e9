"""Variant of cross_entropy, written from the stub alone: a detached per-position max, torch.where for ignored positions."""

import torch
from torch import Tensor

_REDUCTIONS = ("none", "sum", "mean")


def cross_entropy(
    input: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits `input` (class dim 1, or a lone [C] sample) against the
    int64 class indices `target`, matching F.cross_entropy without class weights."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")

    # A [C] input with a 0-d target is one sample: view it as [1, C] with target [1].
    single = input.dim() == 1
    if single:
        input = input.unsqueeze(0)
        target = target.reshape(1)

    out_dtype = input.dtype
    compute_dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    x = input.to(compute_dtype)  # no copy (and no in-place work) when already that dtype

    # Stable log-softmax pieces over dim 1, with a per-position max.
    # The max is a constant shift (logsumexp is shift-invariant), so detaching it is exact
    # and keeps autograd from routing gradient through the argmax.
    m = x.amax(dim=1, keepdim=True).detach()
    shifted = x - m                                                  # [N, C, ...] <= 0
    lse = shifted.exp().sum(dim=1).log()                             # [N, ...], >= 0
    # -log p_c = lse - shifted_c

    target = target.long()
    keep = target != ignore_index                                    # [N, ...]
    safe_target = torch.where(keep, target, torch.zeros_like(target))
    picked = shifted.gather(1, safe_target.unsqueeze(1)).squeeze(1)  # shifted[target]
    nll = lse - picked

    if label_smoothing != 0.0:
        smooth = lse - shifted.mean(dim=1)   # mean over all C of -log p
        loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    else:
        loss = nll

    loss = torch.where(keep, loss, torch.zeros_like(loss))

    if reduction == "none":
        result = loss.squeeze(0) if single else loss
    elif reduction == "sum":
        result = loss.sum()
    else:  # "mean" over non-ignored positions
        result = loss.sum() / keep.sum().to(loss.dtype)

    return result.to(out_dtype)

"""Kata【梯度累积与梯度裁剪】: one optimizer step over several micro-batches, with global-norm clipping."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def accumulate_and_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[tuple[Tensor, Tensor]],
    *,
    max_norm: float | None = None,
    ignore_index: int = -100,
) -> tuple[float, float]:
    """Make ONE optimizer step that equals the step on all micro-batches taken together, and
    return (loss, total_norm) as Python floats.

        micro_batches: a list of (x, y); model(x) returns logits [B, T, V], y is int64 [B, T]
                       holding class ids in [0, V) or ignore_index. B may differ from one
                       micro-batch to the next (T and V do not).
        max_norm:      clip the gradients to this global L2 norm (None: no clipping).

    The loss is the one of the whole batch: F.cross_entropy over every VALID token (y !=
    ignore_index) of ALL micro-batches, the mean over their number N (token-weighted, as
    transformers' `num_items_in_batch`: a micro-batch of many padding tokens weighs less).
    The mean of each micro-batch's mean is wrong as soon as their valid counts differ.

    The procedure:
        1. optimizer.zero_grad(set_to_none=True): gradients left by earlier steps are dropped;
        2. N = the valid tokens of all micro-batches;
        3. for each micro-batch: (cross-entropy summed over its valid tokens / N).backward();
           the gradients add up across micro-batches (a micro-batch with no valid token adds 0);
        4. total_norm = sqrt(sum over the parameters of model.parameters() that have a grad
           of ||grad||**2): the norm of all gradients as one vector (parameters whose grad is
           None, frozen or unused, are skipped);
        5. if max_norm is not None: every grad *= min(1, max_norm / (total_norm + 1e-6)), as
           torch.nn.utils.clip_grad_norm_ (it never scales up; max_norm=inf clips nothing);
        6. optimizer.step(); then optimizer.zero_grad(set_to_none=True).
    Returns (loss, total_norm): the whole batch's mean loss, and the norm BEFORE clipping
    (returned also when max_norm is None).

        - The optimizer (torch.optim.SGD, AdamW...) was made over model.parameters() by the
          caller: step it once, never rebuild it.
        - The model's dtype (float32 or float64) is kept: errors of float32 arithmetic are
          accepted. Its parameters need not all require grad, nor all get one.
        - torch.nn.utils' clipping (clip_grad_norm_, clip_grad_value_, get_total_norm,
          clip_grads_with_norm_) is off limits; F.cross_entropy, torch.linalg.vector_norm and
          the optimizer itself are fine.

    Conventions (judged apart from the math, as production code would need them):
        - no valid token in any micro-batch (N == 0) raises ValueError.
        - returns Python floats, not tensors (loss.item()).
        - gradients are set to None, never zeroed: a parameter that gets no gradient
          (frozen, unused) is never stepped, and every .grad is None on return.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the micro-batches are never changed in place.

    Example:
        >>> model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5))   # logits [B, T, 5]
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> first = (torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, -100]]))          # 2 valid tokens
        >>> second = (torch.tensor([[4, 0, 1], [3, 3, 2]]), torch.tensor([[0, 1, 4], [3, 2, -100]]))  # 5
        >>> loss, norm = accumulate_and_step(model, opt, [first, second], max_norm=1.0)  # N = 7
    """
    ### BEGIN SOLUTION
    # TODO: N = the valid tokens of ALL micro-batches (every micro-batch divides by the same N).
    num_valid = sum(int((y != ignore_index).sum()) for _, y in micro_batches)
    if num_valid == 0:
        raise ValueError("no valid token in the micro-batches: every target is ignore_index")
    # TODO: drop stale gradients: None, not zeros, so a parameter that gets none is not stepped.
    optimizer.zero_grad(set_to_none=True)
    # TODO: per micro-batch, backward the SUM of its token losses over N; .backward() adds up.
    loss = 0.0
    for x, y in micro_batches:
        logits = model(x)
        vocab = logits.size(-1)
        part = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), ignore_index=ignore_index, reduction="sum")
        part = part / num_valid
        part.backward()
        loss += part.item()
    # TODO: the global L2 norm over every grad (None skipped), before any clipping.
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])  # one norm per tensor
    total_norm = torch.linalg.vector_norm(norms)  # = sqrt(sum of their squares)
    # TODO: clip all grads by ONE factor, min(1, max_norm / (total + 1e-6)), then step and clear.
    if max_norm is not None:
        scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # never scales up
        for g in grads:
            g.mul_(scale)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, total_norm.item()
    ### END SOLUTION

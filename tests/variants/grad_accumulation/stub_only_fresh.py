"""Kata【梯度累积与梯度裁剪】: one optimizer step over several micro-batches, with global-norm clipping."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _count_valid(micro_batches: list[tuple[Tensor, Tensor]], ignore_index: int) -> int:
    """The number of target tokens that are not ignore_index, over all micro-batches."""
    return sum(int((y != ignore_index).sum().item()) for _, y in micro_batches)


def _global_grad_norm(grads: list[Tensor]) -> Tensor:
    """L2 norm of all gradients seen as one vector, in the gradients' own dtype."""
    per_param = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    return torch.linalg.vector_norm(per_param)


def accumulate_and_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[tuple[Tensor, Tensor]],
    *,
    max_norm: float | None = None,
    ignore_index: int = -100,
) -> tuple[float, float]:
    """One optimizer step equal to the step on all micro-batches taken together.

    Returns (loss, total_norm) as Python floats: the token-weighted mean cross-entropy of the
    whole batch, and the global L2 norm of the gradients before clipping.
    """
    # N: the valid tokens of ALL micro-batches; every micro-batch divides by this same N.
    n_valid = _count_valid(micro_batches, ignore_index)
    if n_valid == 0:
        raise ValueError("no valid token (y != ignore_index) in any micro-batch")

    # Drop stale gradients as None, so a parameter that gets none is not stepped.
    optimizer.zero_grad(set_to_none=True)

    loss_sum = None
    for x, y in micro_batches:
        if not bool((y != ignore_index).any()):
            continue  # contributes exactly 0 to the loss and to every gradient
        logits = model(x)
        vocab = logits.shape[-1]
        token_loss_sum = F.cross_entropy(
            logits.reshape(-1, vocab), y.reshape(-1),
            ignore_index=ignore_index, reduction="sum",
        )
        (token_loss_sum / n_valid).backward()  # .backward() accumulates into .grad
        detached = token_loss_sum.detach()
        loss_sum = detached if loss_sum is None else loss_sum + detached

    loss = (loss_sum / n_valid).item()

    # Global L2 norm over every existing grad, before any clipping.
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if grads:
        total = _global_grad_norm(grads)
        total_norm = total.item()
        if max_norm is not None:
            # One factor for all grads; never scales up (max_norm=inf gives 1).
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef.to(dtype=g.dtype, device=g.device))
    else:
        total_norm = 0.0

    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, total_norm

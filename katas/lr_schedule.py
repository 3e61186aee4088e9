"""Kata【学习率调度：线性预热后余弦衰减】: linear warmup then cosine decay, as a function and as a PyTorch scheduler."""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Return the learning rate at optimizer step `step` (0, 1, 2, ...), a Python float:

        step < warmup_steps:                  max_lr * step / warmup_steps   (0 at step 0)
        warmup_steps <= step <= decay_steps:  min_lr + 0.5 * (1 + cos(pi * p)) * (max_lr - min_lr),
                                              p = (step - warmup_steps) / (decay_steps - warmup_steps)
        step > decay_steps:                   min_lr

    A linear warmup from 0 that reaches max_lr at step warmup_steps exactly, then half a
    cosine from max_lr down to min_lr at step decay_steps, then min_lr for ever (no rise
    again). This is CS336's get_lr_cosine_schedule and nanoGPT's get_lr (before its warmup
    became (step + 1) / (warmup_steps + 1)).

        - decay_steps is absolute: it counts the warmup (the cosine lasts decay_steps -
          warmup_steps steps), it is not the length of the decay.
        - warmup_steps == 0: no warmup (step 0 is already max_lr).
        - decay_steps == warmup_steps: no decay phase: max_lr at that step (p is 0 there,
          not 0 / 0), min_lr after it.
        - min_lr may be 0, and may equal max_lr (a constant after the warmup).
        - Compute in Python floats (float64: math.cos, not a float32 tensor); errors of a few
          float64 roundings are accepted (about 1e-15 * max_lr).
        - PyTorch's and transformers' schedules that compute a cosine or a warmup for you
          are off limits (CosineAnnealingLR, CosineAnnealingWarmRestarts, LinearLR,
          SequentialLR, OneCycleLR, get_cosine_schedule_with_warmup...); math is fine.

    Conventions (judged apart from the math, as production code would need them):
        - ValueError for warmup_steps < 0, decay_steps < warmup_steps, max_lr <= 0, min_lr < 0,
          min_lr > max_lr, or step < 0.

    Example:
        >>> [round(lr_at(s, max_lr=1.0, min_lr=0.1, warmup_steps=2, decay_steps=4), 4) for s in range(6)]
        [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]
    """
    # TODO: refuse an impossible schedule, and a negative step, with ValueError.
    # TODO: warmup: a straight line from 0 at step 0 to max_lr at step warmup_steps.
    # TODO: after decay_steps: min_lr (clamped: the cosine must not rise again).
    # TODO: the cosine from max_lr (progress 0) to min_lr (progress 1); no decay phase at all
    # TODO: when decay_steps == warmup_steps (progress 0 there, never 0 / 0).
    raise NotImplementedError


def make_scheduler(
    optimizer: torch.optim.Optimizer, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
) -> LRScheduler:
    """Return a torch.optim.lr_scheduler.LRScheduler that drives every param group of
    `optimizer` along lr_at above:

        scheduler = make_scheduler(optimizer, max_lr=..., min_lr=..., warmup_steps=..., decay_steps=...)
        # every group["lr"] is now lr_at(0), whatever lr the groups had before
        for n in range(1, steps + 1):
            optimizer.step(); scheduler.step()
            # every group["lr"] is now lr_at(n)

        - Every param group gets the same lr, lr_at(n): the groups' own lr before the call
          does not scale it (with LambdaLR, make max_lr every group's base lr first).
        - A LambdaLR, or your own subclass of LRScheduler: either is fine. The same rules as
          lr_at (Python floats, no PyTorch or transformers schedule).

    Conventions (judged apart from the math, as production code would need them):
        - make_scheduler raises the same ValueError as lr_at for an impossible schedule.
        - state_dict() round-trips: a scheduler that make_scheduler builds on a fresh optimizer
          and that loads the state_dict() of one stepped n times gives lr_at(n + 1) after one
          step() (resuming from a checkpoint).

    Example:
        >>> opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.5)
        >>> sched = make_scheduler(opt, max_lr=1.0, min_lr=0.1, warmup_steps=2, decay_steps=4)
        >>> opt.param_groups[0]["lr"]
        0.0
        >>> opt.step(); sched.step(); opt.param_groups[0]["lr"]
        0.5
    """
    # TODO: refuse an impossible schedule here (lr_at checks it), not at some later step.
    # TODO: LambdaLR multiplies each group's initial lr by the factor: make that max_lr in every
    # TODO: group (initial_lr too: a scheduler made before may have left its own there).
    # TODO: the factor at step n is lr_at(n) / max_lr. LambdaLR passes its step count (its
    # TODO: last_epoch: 0 at construction, n after n step() calls), which state_dict() saves.
    raise NotImplementedError


"""Kata【学习率调度：线性预热后余弦衰减】: linear warmup then cosine decay, as a function and as a PyTorch scheduler."""

import math

import torch
from torch.optim.lr_scheduler import LRScheduler


def _check_schedule(*, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> None:
    """Raise ValueError for a schedule that cannot be followed."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if decay_steps < warmup_steps:
        raise ValueError(
            f"decay_steps ({decay_steps}) is absolute and must be >= warmup_steps ({warmup_steps})"
        )
    # Negated comparisons so that NaN is refused as well.
    if not max_lr > 0:
        raise ValueError(f"max_lr must be > 0, got {max_lr}")
    if not min_lr >= 0:
        raise ValueError(f"min_lr must be >= 0, got {min_lr}")
    if not min_lr <= max_lr:
        raise ValueError(f"min_lr ({min_lr}) must be <= max_lr ({max_lr})")


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Learning rate at optimizer step `step`: linear warmup from 0 to max_lr over
    warmup_steps steps, half a cosine from max_lr to min_lr ending at (absolute) step
    decay_steps, then min_lr for ever. ValueError for an impossible schedule or step < 0.

        >>> [round(lr_at(s, max_lr=1.0, min_lr=0.1, warmup_steps=2, decay_steps=4), 4) for s in range(6)]
        [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]
    """
    _check_schedule(max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, decay_steps=decay_steps)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")

    max_lr, min_lr = float(max_lr), float(min_lr)
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step == warmup_steps:  # the peak; also the whole "decay" when decay_steps == warmup_steps
        return max_lr
    if step > decay_steps:
        return min_lr
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)  # in (0, 1]; denominator > 0 here
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)


class _WarmupCosineScheduler(LRScheduler):
    """Sets every param group's lr to lr_at(last_epoch). All its state (the schedule's
    parameters and last_epoch) lives in plain attributes, so state_dict() round-trips."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
    ) -> None:
        _check_schedule(max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, decay_steps=decay_steps)
        self.max_lr = float(max_lr)
        self.min_lr = float(min_lr)
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        # The schedule is absolute: the groups' own lr does not matter. Record max_lr as
        # every group's base lr (overwriting what an earlier scheduler may have left).
        for group in optimizer.param_groups:
            group["initial_lr"] = self.max_lr
        super().__init__(optimizer)  # last_epoch -1 -> 0 and applies lr_at(0)

    def _lr(self, step: int) -> float:
        return lr_at(
            step,
            max_lr=self.max_lr,
            min_lr=self.min_lr,
            warmup_steps=self.warmup_steps,
            decay_steps=self.decay_steps,
        )

    def get_lr(self) -> list[float]:
        lr = self._lr(self.last_epoch)
        return [lr for _ in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()


def make_scheduler(
    optimizer: torch.optim.Optimizer, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
) -> LRScheduler:
    """An LRScheduler driving every param group of `optimizer` along lr_at: group["lr"] is
    lr_at(0) right away and lr_at(n) after n step() calls. ValueError for an impossible schedule.

        >>> opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.5)
        >>> sched = make_scheduler(opt, max_lr=1.0, min_lr=0.1, warmup_steps=2, decay_steps=4)
        >>> opt.param_groups[0]["lr"]
        0.0
        >>> opt.step(); sched.step(); opt.param_groups[0]["lr"]
        0.5
    """
    return _WarmupCosineScheduler(
        optimizer, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, decay_steps=decay_steps
    )

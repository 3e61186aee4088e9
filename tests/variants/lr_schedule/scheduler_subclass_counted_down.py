"""Variant of lr_schedule (correct), written from the stub alone: the decay measured down from
max_lr (max_lr - (max_lr - min_lr) * (1 - cos) / 2, rounding unlike min_lr + ... near the end),
the warmup as a fraction times max_lr, and make_scheduler as a subclass of LRScheduler that
reads lr_at at its last_epoch (no LambdaLR, no division by max_lr)."""

import math

import torch
from torch.optim.lr_scheduler import LRScheduler


def _validate(max_lr, min_lr, warmup_steps, decay_steps):
    if warmup_steps < 0 or decay_steps < warmup_steps:
        raise ValueError("need 0 <= warmup_steps <= decay_steps")
    if max_lr <= 0 or min_lr < 0 or min_lr > max_lr:
        raise ValueError("need 0 <= min_lr <= max_lr and max_lr > 0")


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    _validate(max_lr, min_lr, warmup_steps, decay_steps)
    if step < 0:
        raise ValueError("step must be non-negative")
    if step < warmup_steps:
        return (step / warmup_steps) * max_lr
    if step > decay_steps:
        return min_lr
    if decay_steps == warmup_steps:
        return max_lr
    angle = math.pi * (step - warmup_steps) / (decay_steps - warmup_steps)
    return max_lr - (max_lr - min_lr) * (1.0 - math.cos(angle)) / 2.0


class _WarmupCosine(LRScheduler):
    def __init__(self, optimizer, schedule):
        self.schedule = dict(schedule)
        super().__init__(optimizer)

    def get_lr(self):
        value = lr_at(self.last_epoch, **self.schedule)
        return [value for _ in self.optimizer.param_groups]


def make_scheduler(
    optimizer: torch.optim.Optimizer, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
) -> LRScheduler:
    schedule = {"max_lr": max_lr, "min_lr": min_lr, "warmup_steps": warmup_steps, "decay_steps": decay_steps}
    _validate(max_lr, min_lr, warmup_steps, decay_steps)
    return _WarmupCosine(optimizer, schedule)

"""Variant of lr_schedule (correct): nanoGPT's get_lr (karpathy/nanoGPT train.py, before PR
#578 moved its warmup to (it + 1) / (warmup_iters + 1); MIT License, Copyright (c) 2022 Andrej
Karpathy), glued to the signature: its globals (learning_rate, min_lr, warmup_iters,
lr_decay_iters) become the arguments, and make_scheduler drives the param groups with it
through a LambdaLR. Changed only where the docstring requires it: the ValueErrors, and
decay_steps == warmup_steps, where nanoGPT divides by zero (max_lr there); its assert stays."""

import math

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    if warmup_steps < 0 or decay_steps < warmup_steps or max_lr <= 0 or not 0 <= min_lr <= max_lr or step < 0:
        raise ValueError("invalid schedule or step")
    it, learning_rate, warmup_iters, lr_decay_iters = step, max_lr, warmup_steps, decay_steps
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    if lr_decay_iters == warmup_iters:  # glue: no decay phase (nanoGPT divides by zero here)
        return learning_rate
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


def make_scheduler(
    optimizer: torch.optim.Optimizer, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
) -> LRScheduler:
    schedule = {"max_lr": max_lr, "min_lr": min_lr, "warmup_steps": warmup_steps, "decay_steps": decay_steps}
    lr_at(0, **schedule)
    for group in optimizer.param_groups:  # nanoGPT sets param_group["lr"] = lr itself: a base of 1
        group["lr"] = group["initial_lr"] = 1.0
    return LambdaLR(optimizer, lambda it: lr_at(it, **schedule))

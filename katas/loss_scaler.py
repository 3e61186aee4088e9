"""Kata【混合精度训练的动态损失缩放】: dynamic loss scaling, as torch.amp.GradScaler drives one optimizer."""

import torch
from torch import Tensor


class LossScaler:
    """Dynamic loss scaling for mixed-precision training, as torch.amp.GradScaler("cpu") with
    one optimizer. float16 gradients underflow to 0 below 6e-8: multiply the loss by a large
    `scale` before backward (every gradient is then `scale` times larger), divide the gradients
    by it before the optimizer steps, and adjust the scale as training goes: halve it when the
    gradients overflow (inf or NaN, and skip that step), grow it after `growth_interval` steps
    in a row without overflow.

    One training step, in this order (the judge plays it on a tiny model and SGD):

        loss = ...                            # a 0-d float32 or float64 tensor
        scaler.scale(loss).backward()         # grads = scale * d loss / d param
        scaler.unscale_(optimizer)            # optional: to clip (or read) the true gradients
        clip_grad_norm_(params, max_norm)     #   ... the caller's, on unscaled gradients
        scaler.step(optimizer)                # unscale_ if not done yet; step unless overflow
        scaler.update()                       # back off or grow the scale; forget this step

    The methods:
        - scale(loss): loss * scale, a new tensor of loss's shape (the loss itself when disabled).
        - unscale_(optimizer): every gradient of the optimizer's params (every param group;
          a param whose .grad is None is skipped) multiplied, in place, by 1 / scale; and it
          records whether any of those gradients held an inf, -inf or NaN (checked on all of
          them, before or after dividing: the scale is finite and nonzero). GradScaler takes the
          reciprocal in float64 and rounds it to float32; dividing by the scale is as good.
        - step(optimizer, *args, **kwargs): unscale_(optimizer) first, unless it was already
          called this step (never divide twice); then optimizer.step(*args, **kwargs) only if
          no gradient overflowed (else the optimizer is not called: no parameter, no momentum
          changes). The scale does not change in step.
        - update(): after an overflow, scale *= backoff_factor and the growth tracker (the count
          of steps since the last overflow or growth) goes back to 0; otherwise the tracker
          counts this step, and when it reaches growth_interval, scale *= growth_factor and the
          tracker goes back to 0 (interval 3: the scale grows at the 3rd, 6th... clean step).
          It also forgets this step's record, so the next step unscales again.
        - get_scale(): the current scale, a Python float (1.0 when disabled).
        - state_dict(): {"scale", "growth_factor", "backoff_factor", "growth_interval",
          "_growth_tracker"}, GradScaler's keys, as Python numbers (the tracker an int); what
          it returns when disabled is not judged (GradScaler's is {}).
        - load_state_dict(state): takes those five back (a no-op when disabled).
        - enabled=False: scale() returns the loss, step() just calls optimizer.step(*args,
          **kwargs), unscale_() and update() do nothing, get_scale() is 1.0.

        - Gradients are float32 or float64 tensors on the CPU; the judge injects inf, -inf and
          NaN into chosen gradients after backward, at chosen steps.
        - GradScaler keeps the scale as a float32 number; scales are judged within float32
          rounding, so a Python float is fine (a growth that would overflow float32 is not judged).
        - torch.amp.GradScaler (torch.cuda.amp.GradScaler too) and its kernels
          (torch._amp_foreach_non_finite_check_and_unscale_, torch._amp_update_scale_) are off
          limits; torch.isfinite, torch.isinf, torch.isnan and in-place arithmetic are fine.

    Conventions (judged apart from the math, as production code would need them):
        - growth_factor <= 1, backoff_factor outside (0, 1) or growth_interval < 1 raises ValueError
          in __init__, enabled or not.
        - calling unscale_ twice before update() raises RuntimeError.
        - step(optimizer, *args, **kwargs) passes its arguments on to optimizer.step and returns its
          result (None when the step is skipped).
        - state_dict() round-trips: a new LossScaler with the same arguments that loads it (or
          GradScaler's own state_dict) continues exactly as the first would.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> scaler = LossScaler(init_scale=1024.0, growth_interval=2)
        >>> scaler.scale(torch.tensor(0.5))
        tensor(512.)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        # TODO: refuse a factor or interval that would not make a dynamic scale (enabled or not).
        # TODO: the scale, the growth tracker, and this step's record (None: not unscaled yet).
        raise NotImplementedError

    def scale(self, loss: Tensor) -> Tensor:
        # TODO: multiply the loss by the scale (disabled: the loss as it is).
        raise NotImplementedError

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        # TODO: once per step: a second call would divide the gradients twice.
        # TODO: divide every gradient of every param group by the scale, in place; note any inf or NaN.
        raise NotImplementedError

    def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs):
        # TODO: unscale unless the caller already did (to clip), then step only on finite gradients.
        raise NotImplementedError

    def update(self) -> None:
        # TODO: overflow: back off and start counting again; else count, and grow at growth_interval.
        # TODO: forget this step's record: the next step unscales afresh.
        raise NotImplementedError

    def get_scale(self) -> float:
        # TODO: the scale as a Python float; 1.0 when disabled.
        raise NotImplementedError

    def state_dict(self) -> dict:
        # TODO: GradScaler's five keys (its own state when disabled: {}).
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        # TODO: take the five values back (nothing to do when disabled).
        raise NotImplementedError

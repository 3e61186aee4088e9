"""Dynamic loss scaling for mixed-precision training (torch.amp.GradScaler, one optimizer)."""

import math

import torch
from torch import Tensor

_FLOAT32_MAX = torch.finfo(torch.float32).max


class LossScaler:
    """Scale the loss up before backward, unscale the gradients before the optimizer steps,
    skip steps whose gradients overflowed, and adapt the scale as training goes."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if not growth_factor > 1.0:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if growth_interval < 1:
            raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")

        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        # This step's record: None until unscale_ runs, then whether any gradient overflowed.
        self._found_inf: bool | None = None

    # ------------------------------------------------------------------ the training step

    def scale(self, loss: Tensor) -> Tensor:
        if not self._enabled:
            return loss
        # A Python float keeps loss's dtype (float64 stays float64) and its shape.
        return loss * self._scale

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._enabled:
            return
        if self._found_inf is not None:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )

        found_inf = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if not found_inf and not bool(torch.isfinite(grad).all()):
                    found_inf = True
                grad.div_(self._scale)  # in grad's own dtype: float64 stays float64
        self._found_inf = found_inf

    def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if self._found_inf is None:
            self.unscale_(optimizer)
        if self._found_inf:
            return None  # skip: neither parameters nor optimizer state change
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        if not self._enabled:
            return
        if self._found_inf is None:
            raise RuntimeError("update() called before any unscale_() or step() this iteration.")

        if self._found_inf:
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = self._scale * self._growth_factor
                if math.isfinite(grown) and grown <= _FLOAT32_MAX:
                    self._scale = grown
                self._growth_tracker = 0
        self._found_inf = None  # forget this step: the next one unscales afresh

    # ------------------------------------------------------------------ state

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        if len(state) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved "
                "from a disabled instance of LossScaler."
            )
        self._scale = float(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])

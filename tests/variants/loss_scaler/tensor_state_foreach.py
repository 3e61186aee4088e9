"""Variant of loss_scaler, written from the stub alone, in GradScaler's own style: the scale a
float32 0-d tensor and the tracker an int32 one, the gradients unscaled with torch._foreach_mul_
per dtype, the overflow flag a float tensor, and update() branch-free (torch.where)."""

import torch
from torch import Tensor


class LossScaler:
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        problems = []
        if not growth_factor > 1.0:
            problems.append(f"growth_factor={growth_factor} (must be > 1)")
        if not (0.0 < backoff_factor < 1.0):
            problems.append(f"backoff_factor={backoff_factor} (must be in (0, 1))")
        if not growth_interval >= 1:
            problems.append(f"growth_interval={growth_interval} (must be >= 1)")
        if problems:
            raise ValueError("invalid LossScaler arguments: " + ", ".join(problems))
        self._enabled = bool(enabled)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._scale = torch.tensor(float(init_scale), dtype=torch.float32)
        self._tracker = torch.tensor(0, dtype=torch.int32)
        self._found: Tensor | None = None  # float32 0-d: > 0 when this step overflowed

    def scale(self, loss: Tensor) -> Tensor:
        if not self._enabled:
            return loss
        return loss * self._scale.to(loss.device)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._enabled:
            return
        if self._found is not None:
            raise RuntimeError("unscale_() was already called in this step; call update() first")
        inv = self._scale.double().reciprocal().float()
        found = torch.zeros((), dtype=torch.float32)
        by_dtype: dict[torch.dtype, list[Tensor]] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
        with torch.no_grad():
            for grads in by_dtype.values():
                for g in grads:
                    found += (~torch.isfinite(g)).any().float()
                torch._foreach_mul_(grads, inv.to(grads[0].dtype))  # float32 reciprocal, as GradScaler
        self._found = found

    def step(self, optimizer: torch.optim.Optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if self._found is None:
            self.unscale_(optimizer)
        if self._found.item() > 0:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        if not self._enabled:
            return
        if self._found is None:
            raise RuntimeError("update() needs an unscale_() or step() first")
        overflow = self._found > 0
        counted = self._tracker + 1
        grow = ~overflow & (counted >= self._growth_interval)
        backoff, growth = (torch.tensor(f, dtype=torch.float32) for f in (self._backoff_factor, self._growth_factor))
        factor = torch.where(overflow, backoff, torch.where(grow, growth, torch.ones((), dtype=torch.float32)))
        self._scale = self._scale * factor
        self._tracker = torch.where(overflow | grow, torch.zeros_like(counted), counted).to(torch.int32)
        self._found = None

    def get_scale(self) -> float:
        return float(self._scale) if self._enabled else 1.0

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": float(self._scale),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": int(self._tracker),
        }

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        self._scale = torch.tensor(float(state["scale"]), dtype=torch.float32)
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._tracker = torch.tensor(int(state["_growth_tracker"]), dtype=torch.int32)

"""Variant of loss_scaler glued from Megatron-LM's DynamicGradScaler
(megatron/core/optimizer/grad_scaler.py, NVIDIA, Apache-2.0), its update() unchanged: with
hysteresis=1 (back off at the first overflow) and a min_scale below any scale reached, it is
GradScaler's rule. Glue, each only what the stub asks: the tensors on the CPU, not 'cuda'; the
scale and factors as Megatron keeps them ([1] float32 tensors), squeezed where the stub wants a
number or loss's shape; the unscale and inf check of Megatron's optimizer
(_unscale_main_grads_and_check_for_nan) written with torch.isfinite and mul_, since it calls
torch._amp_foreach_non_finite_check_and_unscale_, which this kata forbids; GradScaler's
state_dict keys; ValueError for Megatron's asserts on the factors and the interval."""

import torch
from torch import Tensor


class DynamicGradScaler:
    """Megatron-LM's, as published (device='cuda' -> 'cpu')."""

    def __init__(self, initial_scale, min_scale, growth_factor, backoff_factor, growth_interval, hysteresis):
        assert initial_scale > 0.0
        self._scale = torch.tensor([initial_scale], dtype=torch.float, device="cpu")
        assert min_scale > 0.0
        assert min_scale <= initial_scale
        self.min_scale = torch.tensor([min_scale], dtype=torch.float, device="cpu")
        assert growth_factor > 1.0
        self.growth_factor = torch.tensor([growth_factor], dtype=torch.float, device="cpu")
        assert backoff_factor < 1.0
        assert backoff_factor > 0.0
        self.backoff_factor = torch.tensor([backoff_factor], dtype=torch.float, device="cpu")
        assert growth_interval > 0
        self.growth_interval = growth_interval
        assert hysteresis > 0
        self.hysteresis = hysteresis
        self._growth_tracker = 0
        self._hysteresis_tracker = self.hysteresis

    @property
    def scale(self):
        return self._scale

    @property
    def inv_scale(self):
        return self._scale.double().reciprocal().float()

    def update(self, found_inf: bool):
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker -= 1
            if self._hysteresis_tracker <= 0:
                self._scale = torch.max(self._scale * self.backoff_factor, self.min_scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self.growth_interval:
                self._growth_tracker = 0
                self._hysteresis_tracker = self.hysteresis
                self._scale = self._scale * self.growth_factor


class LossScaler:
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if not (growth_factor > 1.0 and 0.0 < backoff_factor < 1.0 and growth_interval > 0):
            raise ValueError("need growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1")
        self.enabled = enabled
        min_scale = min(float(init_scale), torch.finfo(torch.float32).tiny)
        self.grad_scaler = DynamicGradScaler(init_scale, min_scale, growth_factor, backoff_factor, growth_interval, 1)
        self.found_inf = None

    def scale(self, loss: Tensor) -> Tensor:
        if not self.enabled:
            return loss
        return loss * self.grad_scaler.scale.squeeze(0)

    def unscale_(self, optimizer) -> None:
        if not self.enabled:
            return
        if self.found_inf is not None:
            raise RuntimeError("unscale_() has already been called since the last update()")
        main_grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        found_inf = torch.tensor([0.0], dtype=torch.float)
        with torch.no_grad():
            for grad in main_grads:
                found_inf += (~torch.isfinite(grad)).any().float()
                grad.mul_(self.grad_scaler.inv_scale.to(grad.dtype).squeeze(0))
        self.found_inf = found_inf.item() > 0

    def step(self, optimizer, *args, **kwargs):
        if not self.enabled:
            return optimizer.step(*args, **kwargs)
        if self.found_inf is None:
            self.unscale_(optimizer)
        if self.found_inf:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self) -> None:
        if not self.enabled:
            return
        self.grad_scaler.update(self.found_inf)
        self.found_inf = None

    def get_scale(self) -> float:
        return self.grad_scaler.scale.item() if self.enabled else 1.0

    def state_dict(self) -> dict:
        if not self.enabled:
            return {}
        return {
            "scale": self.grad_scaler.scale.item(),
            "growth_factor": self.grad_scaler.growth_factor.item(),
            "backoff_factor": self.grad_scaler.backoff_factor.item(),
            "growth_interval": self.grad_scaler.growth_interval,
            "_growth_tracker": self.grad_scaler._growth_tracker,
        }

    def load_state_dict(self, state: dict) -> None:
        if not self.enabled:
            return
        self.grad_scaler._scale = torch.tensor([float(state["scale"])], dtype=torch.float)
        self.grad_scaler.growth_factor = torch.tensor([float(state["growth_factor"])], dtype=torch.float)
        self.grad_scaler.backoff_factor = torch.tensor([float(state["backoff_factor"])], dtype=torch.float)
        self.grad_scaler.growth_interval = int(state["growth_interval"])
        self.grad_scaler._growth_tracker = int(state["_growth_tracker"])
        self.grad_scaler._hysteresis_tracker = self.grad_scaler.hysteresis

"""Kata【AdamW 优化器：解耦权重衰减的 Adam，一步一步更新】: the AdamW optimizer, exactly torch.optim.AdamW (Loshchilov & Hutter, 2019)."""

import math

import torch


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay, step for step torch.optim.AdamW(foreach=False).

    The decay shrinks p by lr * weight_decay before the Adam update and never enters the
    moments; eps is added to the bias-corrected sqrt(v), outside the square root.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
        }
        super().__init__(params, defaults)

    def _init_state(self, p: torch.Tensor, amsgrad: bool) -> dict:
        state = self.state[p]
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            eps = group["eps"]
            wd = group["weight_decay"]
            amsgrad = group["amsgrad"]

            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")

                state = self.state[p]
                if len(state) == 0:
                    state = self._init_state(p, amsgrad)

                state["step"] += 1
                t = state["step"].item()

                # Decoupled weight decay: from p before this step's update, scaled by lr.
                p.mul_(1.0 - lr * wd)

                m = state["exp_avg"]
                v = state["exp_avg_sq"]
                m.lerp_(g, 1.0 - beta1)                     # m = beta1 m + (1 - beta1) g
                v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)

                bc1 = 1.0 - beta1**t
                bc2 = 1.0 - beta2**t

                if amsgrad:
                    v_max = state["max_exp_avg_sq"]
                    torch.maximum(v_max, v, out=v_max)
                    v_hat = v_max
                else:
                    v_hat = v

                denom = (v_hat.sqrt() / math.sqrt(bc2)).add_(eps)
                p.addcdiv_(m, denom, value=-(lr / bc1))

        return loss

"""A variant in another style, written from the stub alone: the moments by lerp (as PyTorch's
single-tensor path keeps m), the bias corrections folded into v_hat and m_hat, the update
built out of place and subtracted, the decay as p -= lr * wd * p."""

import torch


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        checks = {
            "learning rate": lr >= 0,
            "epsilon": eps >= 0,
            "beta1": 0 <= betas[0] < 1,
            "beta2": 0 <= betas[1] < 1,
            "weight decay": weight_decay >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"Invalid {name}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        self._update(p, p.grad, group)
        return loss

    def _update(self, p, g, group):
        if g.is_sparse:
            raise RuntimeError("sparse gradients are not supported")
        b1, b2 = group["betas"]
        st = self.state[p]
        if not st:
            st["step"] = torch.tensor(0.0)
            st["exp_avg"] = torch.zeros_like(p)
            st["exp_avg_sq"] = torch.zeros_like(p)
            if group["amsgrad"]:
                st["max_exp_avg_sq"] = torch.zeros_like(p)
        st["step"].add_(1)
        t = float(st["step"])
        p.sub_(group["lr"] * group["weight_decay"] * p)
        st["exp_avg"].lerp_(g, 1 - b1)
        st["exp_avg_sq"].mul_(b2).add_((1 - b2) * g * g)
        v = st["exp_avg_sq"]
        if group["amsgrad"]:
            st["max_exp_avg_sq"].copy_(torch.maximum(st["max_exp_avg_sq"], v))
            v = st["max_exp_avg_sq"]
        m_hat = st["exp_avg"] / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))

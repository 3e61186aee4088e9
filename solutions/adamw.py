"""Kata【AdamW 优化器的一步】: the AdamW optimizer, exactly torch.optim.AdamW (Loshchilov & Hutter, 2019)."""

import math

import torch


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay, step for step torch.optim.AdamW(foreach=False).

    __init__(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False)
        - params: an iterable of tensors (model.parameters()) or of param groups, dicts
          {"params": [...], "lr": ..., ...}: a group's own options override the defaults.
          Pass the defaults to torch.optim.Optimizer.__init__(params, defaults) as the dict
          {"lr", "betas", "eps", "weight_decay", "amsgrad"}: it builds self.param_groups
          (every group with every option) and self.state (a dict: param -> its state), and
          gives you state_dict(), load_state_dict() and zero_grad() for free.

    step(closure=None), under @torch.no_grad(): for each group, with its own lr, (beta1,
    beta2), eps, weight_decay (wd) and amsgrad, for each param p of the group:
        - p.grad is None: skip p entirely (no decay, no state created or changed).
        - p's state is created on its first step, as PyTorch's, under the same keys:
              state["step"]           torch.tensor(0.0): a 0-d float32 tensor on the CPU
              state["exp_avg"]        m, zeros like p
              state["exp_avg_sq"]     v, zeros like p
              state["max_exp_avg_sq"] zeros like p, only when amsgrad
          so that torch.optim.AdamW's load_state_dict(your_optimizer.state_dict()) continues
          exactly where yours stopped.
        - then, with g = p.grad:
              step += 1;  t = step as a Python number (t is 1 on the first step)
              p *= 1 - lr * wd                      (decoupled decay, first: from p before
                                                     this step's update, scaled by lr)
              m = beta1 * m + (1 - beta1) * g
              v = beta2 * v + (1 - beta2) * g * g
              bc1 = 1 - beta1**t,  bc2 = 1 - beta2**t
              amsgrad: v_max = max(v_max, v), and v_max replaces v below
              p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
          m, v and v_max are updated in place in the state; p is updated in place.
        - The decay never touches g, m or v (that is Adam's L2 weight_decay, not AdamW's);
          eps is added after dividing sqrt(v) by sqrt(bc2), outside the square root.
        - params are float32 or float64 (the state has p's dtype); any shape, 0-d included.
          Errors of float32 arithmetic are accepted.
        - torch.optim.Adam and AdamW, their functional forms (torch.optim.adam.adam,
          torch.optim.adamw.adamw, torch.optim._functional) and the fused kernels
          (torch._fused_adam_, torch._fused_adamw_) are off limits; torch._foreach_* and
          every elementwise op are fine.

    Conventions (judged apart from the math, as production code would need them):
        - lr < 0, eps < 0, a beta outside [0, 1) or weight_decay < 0 raises ValueError (as
          PyTorch's, e.g. "Invalid learning rate: -0.1"; the message is not judged).
        - step(closure) calls closure() under torch.enable_grad() before updating (it
          recomputes the loss and its gradients), and returns what it returned; step() returns None.
        - a sparse gradient raises RuntimeError, as PyTorch's AdamW does.
        - state["step"] is torch.tensor(0.0) counted up (a 0-d float32 tensor), and a param
          that never had a gradient has no state.
        - float64 inputs are computed in float64 throughout (no step in float32). Take t from
          state["step"] as a Python number (.item()): 1 - beta**step in float32 loses digits.
        - p.grad is never changed in place.

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        >>> opt = AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = torch.tensor([0.3, 0.0])
        >>> opt.step()
        >>> w.detach()          # [1 * 0.95 - 0.1 * 1, -2 * 0.95 - 0]: the first step is lr * sign(g)
        tensor([ 0.8500, -1.9000])
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
        ### BEGIN SOLUTION
        # TODO: refuse a negative lr, eps or weight_decay and a beta outside [0, 1) with ValueError;
        # TODO: hand the defaults to Optimizer.__init__: it makes self.param_groups and self.state.
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad}
        super().__init__(params, defaults)
        ### END SOLUTION

    @torch.no_grad()
    def step(self, closure=None):
        ### BEGIN SOLUTION
        # TODO: run the closure (if any) under torch.enable_grad(): it recomputes the loss and grads.
        # TODO: for each group, read its own lr, betas, eps, weight_decay and amsgrad; for each of
        # TODO: its params with a grad (skip p.grad None: no decay, no state), create the state on
        # TODO: first use under PyTorch's keys, count the step first (t = 1 on the first, a Python
        # TODO: number), decay p by lr * wd, update m and v in place, correct their bias, and step.
        loss = None
        if closure is not None:
            with torch.enable_grad():  # step() itself runs under no_grad
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            weight_decay, amsgrad = group["weight_decay"], group["amsgrad"]
            for p in group["params"]:
                if p.grad is None:
                    continue  # no gradient this step: no decay, no state created or changed
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self.state[p]
                if len(state) == 0:  # lazily, so a param that never gets a grad has no state
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if amsgrad:
                        state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                # t counts this step too (1 on the first), read as a Python float: 1 - beta**t
                # cancels, and in float32 it would lose most of its digits
                state["step"] += 1
                t = state["step"].item()
                # decoupled weight decay: p itself shrinks, scaled by lr, before this step's update;
                # it never enters the gradient, so m and v see the loss's gradient alone
                p.mul_(1 - lr * weight_decay)
                # the moving averages of g and g * g
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                # m and v start at 0, so their early averages are too small by 1 - beta**t
                bias_correction1 = 1 - beta1**t
                bias_correction2 = 1 - beta2**t
                second = exp_avg_sq
                if amsgrad:
                    # AMSGrad: normalise by the largest v so far (of v itself, not of v / bc2)
                    torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
                    second = state["max_exp_avg_sq"]
                # p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps): eps after the correction
                denom = (second.sqrt() / math.sqrt(bias_correction2)).add_(eps)
                p.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
        return loss
        ### END SOLUTION

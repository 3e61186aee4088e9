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
        # TODO: refuse a negative lr, eps or weight_decay and a beta outside [0, 1) with ValueError;
        # TODO: hand the defaults to Optimizer.__init__: it makes self.param_groups and self.state.
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        # TODO: run the closure (if any) under torch.enable_grad(): it recomputes the loss and grads.
        # TODO: for each group, read its own lr, betas, eps, weight_decay and amsgrad; for each of
        # TODO: its params with a grad (skip p.grad None: no decay, no state), create the state on
        # TODO: first use under PyTorch's keys, count the step first (t = 1 on the first, a Python
        # TODO: number), decay p by lr * wd, update m and v in place, correct their bias, and step.
        raise NotImplementedError

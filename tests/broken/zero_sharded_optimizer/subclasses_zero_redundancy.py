"""Hands the whole job to torch.distributed.optim.ZeroRedundancyOptimizer (a subclass of it), and
averages the gradients itself, as the stub asks."""

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


class ShardedOptimizer(ZeroRedundancyOptimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        super().__init__(params, optimizer_cls, **kwargs)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
        super().step()
        return loss

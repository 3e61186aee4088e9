"""zero_sharded_optimizer in another style: every gradient averaged through one flat bucket (one
all_reduce), a dict of local optimizers keyed by group index, and the parameters sent back with
asynchronous broadcasts, all posted before any is waited on."""

from typing import Any

import torch
import torch.distributed as dist


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls: type, **kwargs: Any):
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        self.optimizer_cls = optimizer_cls
        self.defaults_given = kwargs
        self.param_to_rank: dict = {}
        self.rank_sizes = [0] * self.world_size
        self.local_optimizers: dict[int, torch.optim.Optimizer] = {}
        super().__init__(params, kwargs)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        index = len(self.param_groups) - 1
        group = self.param_groups[index]
        order = sorted(range(len(group["params"])), key=lambda i: (-group["params"][i].numel(), i))
        for i in order:
            p = group["params"][i]
            target = min(range(self.world_size), key=lambda r: (self.rank_sizes[r], r))
            self.param_to_rank[p] = target
            self.rank_sizes[target] += p.numel()
        owned = [p for p in group["params"] if self.param_to_rank[p] == self.rank]
        if owned:
            options = {k: v for k, v in group.items() if k != "params"}
            self.local_optimizers[index] = self.optimizer_cls(owned, **options)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for g in self.param_groups for p in g["params"]]
        with_grad = [p for p in params if p.grad is not None]
        if with_grad:
            bucket = torch.cat([p.grad.reshape(-1) for p in with_grad])
            dist.all_reduce(bucket)
            bucket /= self.world_size
            offset = 0
            for p in with_grad:
                n = p.grad.numel()
                p.grad.copy_(bucket[offset : offset + n].view_as(p.grad))
                offset += n
        for index, local in self.local_optimizers.items():
            for key, value in self.param_groups[index].items():
                if key != "params":
                    local.param_groups[0][key] = value
            local.step()
        works = [dist.broadcast(p.data, src=self.param_to_rank[p], async_op=True) for p in params]
        for work in works:
            work.wait()
        return loss

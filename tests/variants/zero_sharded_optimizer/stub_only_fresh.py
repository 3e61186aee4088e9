"""Kata【ZeRO-1 优化器状态分片】: ZeRO stage 1, the optimizer state sharded over the ranks."""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

# Keys of a parameter group that are not hyperparameters of the local optimizer.
_NOT_HYPER = ("params", "param_names")


class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO-1: every rank steps only the parameters it owns, then broadcasts them."""

    def __init__(self, params, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any):
        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank()
            self.world_size = dist.get_world_size()
        else:  # no process group: behave as a world of one
            self.rank, self.world_size = 0, 1
        self.optimizer_cls = optimizer_cls
        self.optimizer_kwargs = dict(kwargs)
        self.owner: dict[Tensor, int] = {}  # parameter -> its owner rank
        self.loads = [0] * self.world_size  # elements owned per rank
        self.local_optimizers: list[torch.optim.Optimizer | None] = []  # one per group
        super().__init__(params, kwargs)

    def add_param_group(self, param_group: dict) -> None:
        # The base class validates the group, fills in the defaults and appends it.
        super().add_param_group(param_group)
        group = self.param_groups[-1]

        # Largest first (stable, so equal sizes keep their order), each to the least-loaded
        # rank, ties to the lower rank. Deterministic, hence identical on every rank.
        for p in sorted(group["params"], key=lambda t: -t.numel()):
            if p in self.owner:  # the same tensor twice in one group: keep its first owner
                continue
            r = min(range(self.world_size), key=lambda i: (self.loads[i], i))
            self.owner[p] = r
            self.loads[r] += p.numel()

        mine = [p for p in group["params"] if self.owner[p] == self.rank]
        mine = list(dict.fromkeys(mine))  # no duplicates in the local optimizer
        if not mine:
            self.local_optimizers.append(None)
            return
        hyper = {k: v for k, v in group.items() if k not in _NOT_HYPER}
        self.local_optimizers.append(self.optimizer_cls([{"params": mine, **hyper}], **self.optimizer_kwargs))

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        n = self.world_size
        distributed = n > 1

        # Average the gradients over the ranks (same parameters with a grad on every rank).
        if distributed:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                        p.grad.div_(n)

        # Bring the hyperparameters in (a scheduler may have changed them) and step.
        for group, local in zip(self.param_groups, self.local_optimizers):
            if local is None:
                continue
            local_group = local.param_groups[0]
            for k, v in group.items():
                if k not in _NOT_HYPER:
                    local_group[k] = v
            local.step()

        # Every parameter from its owner to everybody.
        if distributed:
            for group in self.param_groups:
                for p in group["params"]:
                    dist.broadcast(p.data, src=self.owner[p])

        return loss

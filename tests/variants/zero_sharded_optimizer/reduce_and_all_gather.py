"""zero_sharded_optimizer in another style: one local optimizer with a group per group (made when
this rank first owns something), owners in the order given (an in-order least-loaded greedy),
gradients reduced to their owner only, and the parameters synchronised by one flat all-gather of
every rank's shard (padded to the largest shard) instead of a broadcast per parameter."""

import torch
import torch.distributed as dist


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, optimizer_cls, **kwargs):
        self._n = dist.get_world_size()
        self._me = dist.get_rank()
        self._cls = optimizer_cls
        self._kw = kwargs
        self._owner_of = {}
        self._numel_owned = [0] * self._n
        self._local = None
        self._local_index = []  # for each group: its index in self._local.param_groups, or None
        super().__init__(params, kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:  # in the order given: any least-loaded greedy meets the bound
            least = self._numel_owned.index(min(self._numel_owned))
            self._owner_of[p] = least
            self._numel_owned[least] += p.numel()
        mine = [p for p in group["params"] if self._owner_of[p] == self._me]
        if not mine:
            self._local_index.append(None)
            return
        entry = dict(group, params=mine)
        if self._local is None:
            self._local = self._cls([entry], **self._kw)
        else:
            self._local.add_param_group(entry)
        self._local_index.append(len(self._local.param_groups) - 1)

    def _everything(self):
        return [p for g in self.param_groups for p in g["params"]]

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            everything = self._everything()
            for p in everything:
                if p.grad is None:
                    continue
                owner = self._owner_of[p]
                dist.reduce(p.grad, dst=owner, op=dist.ReduceOp.SUM)
                if owner == self._me:
                    p.grad.div_(self._n)
            if self._local is not None:
                for group, index in zip(self.param_groups, self._local_index):
                    if index is not None:
                        for key, value in group.items():
                            if key != "params":
                                self._local.param_groups[index][key] = value
                self._local.step()
            self._gather(everything)
        return loss

    def _gather(self, everything):
        """Every rank's owned parameters, packed flat, padded to the largest shard, all-gathered."""
        by_rank = [[p for p in everything if self._owner_of[p] == r] for r in range(self._n)]
        sizes = [sum(p.numel() for p in ps) for ps in by_rank]
        width = max(sizes)
        if width == 0:
            return
        dtype = everything[0].dtype
        shard = torch.zeros(width, dtype=dtype)
        if by_rank[self._me]:
            flat = torch.cat([p.detach().reshape(-1).to(dtype) for p in by_rank[self._me]])
            shard[: flat.numel()] = flat
        gathered = torch.empty(self._n * width, dtype=dtype)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        gather(gathered, shard)
        for r in range(self._n):
            offset = r * width
            for p in by_rank[r]:
                p.copy_(gathered[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

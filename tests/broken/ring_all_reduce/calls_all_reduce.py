"""Delegates to gloo's own all-reduce: refused at torch's communication operator."""

import torch.distributed as dist


def ring_all_reduce(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out

"""Broken softmax: calls torch.softmax from a Tensor.apply_ callback (Python run from inside a torch kernel). Expected verdict: forbidden."""

import torch

_found = {}


def softmax(x, dim=-1):
    def callback(value):
        _found["y"] = torch.softmax(x, dim)
        return value

    torch.zeros(1).apply_(callback)
    return _found["y"]


def log_softmax(x, dim=-1):
    shifted = x - x.amax(dim, keepdim=True)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()

"""tensor_parallel_linear in another style: one module-level helper for the group, the gather
through dist.all_gather_into_tensor on a flat buffer, init done on the full tensors with
nn.init (as nn.Linear.reset_parameters does) before slicing, and the operators as plain
functions wrapping autograd Functions."""

import math

import torch
import torch.distributed as dist
from torch import nn


def _group():
    return dist.get_world_size(), dist.get_rank()


class _F(torch.autograd.Function):  # copy: identity / all-reduce
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        if dist.get_world_size() > 1:
            dist.all_reduce(g, op=dist.ReduceOp.SUM)
        return g


class _G(torch.autograd.Function):  # reduce: all-reduce / identity
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        if dist.get_world_size() > 1:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def _gather(x):
    n, _ = _group()
    if n == 1:
        return x
    moved = x.movedim(-1, 0).contiguous()  # [k, ...]
    out = torch.empty((n * moved.shape[0], *moved.shape[1:]), dtype=x.dtype)
    dist.all_gather_into_tensor(out, moved)
    return out.movedim(0, -1)


def _slice(x):
    n, r = _group()
    k = x.shape[-1] // n
    return x[..., r * k : (r + 1) * k]


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _gather(x)

    @staticmethod
    def backward(ctx, g):
        return _slice(g).contiguous()


class _Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _slice(x).contiguous()

    @staticmethod
    def backward(ctx, g):
        return _gather(g.contiguous())


def _full_init(out_f, in_f, bias):
    w = torch.empty(out_f, in_f)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    b = None
    if bias:
        bound = 1 / math.sqrt(in_f) if in_f > 0 else 0
        b = torch.empty(out_f).uniform_(-bound, bound)
    return w, b


class ColumnParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, *, gather_output=True):
        super().__init__()
        n, r = _group()
        if out_features % n != 0:
            raise ValueError("out_features must be divisible by the world size")
        self.gather_output = gather_output
        per = out_features // n
        w, b = _full_init(out_features, in_features, bias)
        self.weight = nn.Parameter(w[r * per : (r + 1) * per].clone())
        self.bias = nn.Parameter(b[r * per : (r + 1) * per].clone()) if bias else None

    @classmethod
    def from_linear(cls, linear, *, gather_output=True):
        n, r = _group()
        out_f, in_f = linear.weight.shape
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        if out_f % n != 0:
            raise ValueError("out_features must be divisible by the world size")
        per = out_f // n
        self.gather_output = gather_output
        self.weight = nn.Parameter(linear.weight.detach()[r * per : (r + 1) * per].clone())
        if linear.bias is None:
            self.bias = None
        else:
            self.bias = nn.Parameter(linear.bias.detach()[r * per : (r + 1) * per].clone())
        return self

    def forward(self, x):
        y = torch.matmul(_F.apply(x), self.weight.t())
        if self.bias is not None:
            y = y + self.bias
        return _Gather.apply(y) if self.gather_output else y


class RowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, *, input_is_parallel=True):
        super().__init__()
        n, r = _group()
        if in_features % n != 0:
            raise ValueError("in_features must be divisible by the world size")
        self.input_is_parallel = input_is_parallel
        per = in_features // n
        w, b = _full_init(out_features, in_features, bias)
        self.weight = nn.Parameter(w[:, r * per : (r + 1) * per].clone())
        self.bias = nn.Parameter(b.clone()) if bias else None

    @classmethod
    def from_linear(cls, linear, *, input_is_parallel=True):
        n, r = _group()
        out_f, in_f = linear.weight.shape
        if in_f % n != 0:
            raise ValueError("in_features must be divisible by the world size")
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        per = in_f // n
        self.input_is_parallel = input_is_parallel
        self.weight = nn.Parameter(linear.weight.detach()[:, r * per : (r + 1) * per].clone())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        return self

    def forward(self, x):
        if not self.input_is_parallel:
            x = _Split.apply(x)
        y = _G.apply(torch.matmul(x, self.weight.t()))
        return y if self.bias is None else y + self.bias

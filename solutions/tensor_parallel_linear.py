"""Kata【Megatron 张量并行线性层】: column- and row-parallel linear layers with the f/g operators."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

# The conjugate operators, as autograd Functions (each is the other's transpose: f's backward
# is g's forward). With N = 1 none of them calls a collective.


class CopyToParallel(torch.autograd.Function):
    """f: identity in forward; all-reduce (SUM) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return x.view_as(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _all_reduce(grad)
        ### END SOLUTION


class ReduceFromParallel(torch.autograd.Function):
    """g: all-reduce (SUM) in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _all_reduce(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return grad
        ### END SOLUTION


class GatherFromParallel(torch.autograd.Function):
    """All-gather along the last dim, in rank order, in forward; this rank's slice of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _gather_last(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _split_last(grad)
        ### END SOLUTION


class ScatterToParallel(torch.autograd.Function):
    """This rank's slice of the last dim in forward; all-gather of the gradient along it in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _split_last(x)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        return _gather_last(grad)
        ### END SOLUTION


def _all_reduce(x: Tensor) -> Tensor:
    """The sum over ranks, in a new tensor."""
    ### BEGIN SOLUTION
    if dist.get_world_size() == 1:
        return x
    x = x.clone()
    dist.all_reduce(x)  # SUM
    return x
    ### END SOLUTION


def _split_last(x: Tensor) -> Tensor:
    """This rank's slice of the last dim (equal slices)."""
    ### BEGIN SOLUTION
    world = dist.get_world_size()
    if world == 1:
        return x
    return x.chunk(world, dim=-1)[dist.get_rank()].contiguous()
    ### END SOLUTION


def _gather_last(x: Tensor) -> Tensor:
    """Every rank's x concatenated along the last dim, in rank order."""
    ### BEGIN SOLUTION
    world = dist.get_world_size()
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=-1)  # rank order
    ### END SOLUTION


class ColumnParallelLinear(nn.Module):
    """A linear layer whose OUTPUT features are split across the ranks (Megatron-LM, Shoeybi et al. 2019).

    Called on every rank of an initialised default process group (torch.distributed, gloo;
    rank r of N = dist.get_world_size()). With o = out_features // N, rank r holds rows
    [r*o, (r+1)*o) of the full nn.Linear weight:
        self.weight: Parameter [out_features // N, in_features]
        self.bias:   Parameter [out_features // N] (its slice of the full bias) or None
    forward(x), x: [..., in_features], the SAME full input on every rank:
        1. x goes through the operator f ("copy"): identity in forward; in backward, the
           gradient is all-reduced (SUM) over ranks (each rank's slice of the weight sees all of x,
           so x's gradient is the sum of every rank's part);
        2. y_r = x @ W_r^T + b_r: [..., out_features // N];
        3. gather_output=True: all-gather y_r along the LAST dim in rank order -> [..., out_features]
           (backward: each rank keeps its own slice of the gradient); gather_output=False:
           return y_r (the input of a RowParallelLinear).
    Write f and the gather as torch.autograd.Function subclasses over dist.all_reduce /
    dist.all_gather. Sums, never means. With N = 1 no collective is called.
    DTensor (torch.distributed.tensor), torch.distributed.nn.functional and the functional
    collectives are removed from the kata's process: write the operators yourself.

    from_linear(linear) builds the layer from a full nn.Linear: this rank's rows of its weight
    (and bias), copied (no storage shared with `linear`), same dtype.

    Raises:
        ValueError: out_features is not divisible by the world size.

    Conventions:
        - the plain constructor initialises the full weight and bias as nn.Linear(in_features, out_features) would, from the global RNG (in the same state on every rank), and keeps this rank's slice.
        - from_linear copies: the layer shares no storage with `linear`.
        - ValueError when the features to split are not divisible by the world size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, gather_output: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: world size and rank; ValueError when out_features % N != 0.
        world, rank = dist.get_world_size(), dist.get_rank()
        if out_features % world:
            raise ValueError(f"out_features={out_features} is not divisible by the world size {world}")
        # TODO: build the full nn.Linear (its init, same RNG on every rank) and keep rows [r*o, (r+1)*o).
        self.in_features, self.out_features, self.gather_output = in_features, out_features, gather_output
        full = nn.Linear(in_features, out_features, bias=bias)
        rows = slice(rank * (out_features // world), (rank + 1) * (out_features // world))
        self.weight = nn.Parameter(full.weight.detach()[rows].clone())
        self.bias = nn.Parameter(full.bias.detach()[rows].clone()) if bias else None
        ### END SOLUTION

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, gather_output: bool = True) -> "ColumnParallelLinear":
        ### BEGIN SOLUTION
        # TODO: a layer of the same sizes; copy this rank's rows of linear's weight and bias.
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, gather_output=gather_output)
        rows = layer.weight.shape[0]
        start = dist.get_rank() * rows
        with torch.no_grad():
            layer.weight = nn.Parameter(linear.weight.detach()[start : start + rows].clone())
            if linear.bias is not None:
                layer.bias = nn.Parameter(linear.bias.detach()[start : start + rows].clone())
        return layer
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: f (copy) -> this rank's linear -> all-gather along the last dim if gather_output.
        y = F.linear(CopyToParallel.apply(x), self.weight, self.bias)
        return GatherFromParallel.apply(y) if self.gather_output else y
        ### END SOLUTION


class RowParallelLinear(nn.Module):
    """A linear layer whose INPUT features are split across the ranks (Megatron-LM).

    With i = in_features // N, rank r holds columns [r*i, (r+1)*i) of the full weight:
        self.weight: Parameter [out_features, in_features // N]
        self.bias:   Parameter [out_features], the FULL bias, the same on every rank, or None
    forward(x):
        - input_is_parallel=True: x is this rank's slice [..., in_features // N] (a
          ColumnParallelLinear's output with gather_output=False);
          input_is_parallel=False: x is the full [..., in_features] on every rank and is split
          first: forward keeps this rank's slice of the last dim, backward all-gathers the
          gradient (so x's gradient is the full one on every rank);
        - the partial product x_r @ W_r^T goes through the operator g: all-reduce (SUM) in
          forward, identity in backward;
        - the bias is added once, AFTER the reduction -> [..., out_features] on every rank.
    The Megatron MLP is ColumnParallelLinear(gather_output=False) -> GELU ->
    RowParallelLinear(input_is_parallel=True): one all-reduce in forward (g), one in backward (f).
    Write g and the split as torch.autograd.Function subclasses. With N = 1 no collective is called.

    from_linear(linear) builds the layer from a full nn.Linear: this rank's columns of its
    weight, the whole bias, copied (no storage shared with `linear`), same dtype.

    Raises:
        ValueError: in_features is not divisible by the world size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, input_is_parallel: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: ValueError when in_features % N != 0; the full nn.Linear, keep columns [r*i, (r+1)*i).
        world, rank = dist.get_world_size(), dist.get_rank()
        if in_features % world:
            raise ValueError(f"in_features={in_features} is not divisible by the world size {world}")
        self.in_features, self.out_features, self.input_is_parallel = in_features, out_features, input_is_parallel
        full = nn.Linear(in_features, out_features, bias=bias)
        columns = slice(rank * (in_features // world), (rank + 1) * (in_features // world))
        self.weight = nn.Parameter(full.weight.detach()[:, columns].clone())
        self.bias = nn.Parameter(full.bias.detach().clone()) if bias else None
        ### END SOLUTION

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, input_is_parallel: bool = True) -> "RowParallelLinear":
        ### BEGIN SOLUTION
        # TODO: a layer of the same sizes; copy this rank's columns of the weight and the whole bias.
        layer = cls(
            linear.in_features, linear.out_features, linear.bias is not None, input_is_parallel=input_is_parallel
        )
        columns = layer.weight.shape[1]
        start = dist.get_rank() * columns
        with torch.no_grad():
            layer.weight = nn.Parameter(linear.weight.detach()[:, start : start + columns].clone())
            if linear.bias is not None:
                layer.bias = nn.Parameter(linear.bias.detach().clone())
        return layer
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: split x unless input_is_parallel; g (all-reduce) of x_r @ W_r^T; then the bias, once.
        if not self.input_is_parallel:
            x = ScatterToParallel.apply(x)
        y = ReduceFromParallel.apply(F.linear(x, self.weight))
        return y + self.bias if self.bias is not None else y
        ### END SOLUTION

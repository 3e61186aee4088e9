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
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        raise NotImplementedError


class ReduceFromParallel(torch.autograd.Function):
    """g: all-reduce (SUM) in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        raise NotImplementedError


class GatherFromParallel(torch.autograd.Function):
    """All-gather along the last dim, in rank order, in forward; this rank's slice of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        raise NotImplementedError


class ScatterToParallel(torch.autograd.Function):
    """This rank's slice of the last dim in forward; all-gather of the gradient along it in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        raise NotImplementedError

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        raise NotImplementedError


def _all_reduce(x: Tensor) -> Tensor:
    """The sum over ranks, in a new tensor."""
    raise NotImplementedError


def _split_last(x: Tensor) -> Tensor:
    """This rank's slice of the last dim (equal slices)."""
    raise NotImplementedError


def _gather_last(x: Tensor) -> Tensor:
    """Every rank's x concatenated along the last dim, in rank order."""
    raise NotImplementedError


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
        # TODO: world size and rank; ValueError when out_features % N != 0.
        # TODO: build the full nn.Linear (its init, same RNG on every rank) and keep rows [r*o, (r+1)*o).
        raise NotImplementedError

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, gather_output: bool = True) -> "ColumnParallelLinear":
        # TODO: a layer of the same sizes; copy this rank's rows of linear's weight and bias.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: f (copy) -> this rank's linear -> all-gather along the last dim if gather_output.
        raise NotImplementedError


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
        # TODO: ValueError when in_features % N != 0; the full nn.Linear, keep columns [r*i, (r+1)*i).
        raise NotImplementedError

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, input_is_parallel: bool = True) -> "RowParallelLinear":
        # TODO: a layer of the same sizes; copy this rank's columns of the weight and the whole bias.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: split x unless input_is_parallel; g (all-reduce) of x_r @ W_r^T; then the bias, once.
        raise NotImplementedError

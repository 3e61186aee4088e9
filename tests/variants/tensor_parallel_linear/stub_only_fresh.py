"""Kata【Megatron 张量并行线性层】: column- and row-parallel linear layers with the f/g operators."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn


# ----------------------------------------------------------------------------------------------
# The world: size and rank of the default process group (1 and 0 when there is none).
# ----------------------------------------------------------------------------------------------


def _world_size() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


# ----------------------------------------------------------------------------------------------
# The raw communication helpers (no autograd).
# ----------------------------------------------------------------------------------------------


def _all_reduce(x: Tensor) -> Tensor:
    """The sum over ranks, in a new tensor."""
    out = x.clone(memory_format=torch.contiguous_format)
    if _world_size() > 1:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def _split_last(x: Tensor) -> Tensor:
    """This rank's slice of the last dim (equal slices)."""
    n = _world_size()
    width = x.shape[-1]
    if width % n != 0:
        raise ValueError(f"last dim {width} is not divisible by the world size {n}")
    chunk = width // n
    return x.narrow(-1, _rank() * chunk, chunk).clone(memory_format=torch.contiguous_format)


def _gather_last(x: Tensor) -> Tensor:
    """Every rank's x concatenated along the last dim, in rank order."""
    n = _world_size()
    if n == 1:
        return x.clone(memory_format=torch.contiguous_format)
    local = x.contiguous()
    parts = [torch.empty_like(local) for _ in range(n)]
    dist.all_gather(parts, local)
    return torch.cat(parts, dim=-1)


# ----------------------------------------------------------------------------------------------
# The conjugate operators, as autograd Functions. With N = 1 each one is the identity.
# ----------------------------------------------------------------------------------------------


class CopyToParallel(torch.autograd.Function):
    """f: identity in forward; all-reduce (SUM) of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        if _world_size() == 1:
            return grad
        return _all_reduce(grad)


class ReduceFromParallel(torch.autograd.Function):
    """g: all-reduce (SUM) in forward; identity in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        if _world_size() == 1:
            return x.view_as(x)
        return _all_reduce(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad


class GatherFromParallel(torch.autograd.Function):
    """All-gather along the last dim, in rank order, in forward; this rank's slice of the gradient in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        if _world_size() == 1:
            return x.view_as(x)
        return _gather_last(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        if _world_size() == 1:
            return grad
        return _split_last(grad)


class ScatterToParallel(torch.autograd.Function):
    """This rank's slice of the last dim in forward; all-gather of the gradient along it in backward."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        if _world_size() == 1:
            return x.view_as(x)
        return _split_last(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        if _world_size() == 1:
            return grad
        return _gather_last(grad)


# ----------------------------------------------------------------------------------------------
# The layers.
# ----------------------------------------------------------------------------------------------


def _check_divisible(features: int, n: int, what: str) -> int:
    if features % n != 0:
        raise ValueError(f"{what}={features} is not divisible by the world size {n}")
    return features // n


class ColumnParallelLinear(nn.Module):
    """A linear layer whose OUTPUT features are split across the ranks (Megatron-LM, Shoeybi et al. 2019).

    Rank r of N holds rows [r*o, (r+1)*o) of the full nn.Linear weight (o = out_features // N),
    and its slice of the bias. forward: f (copy) -> local linear -> all-gather along the last
    dim when gather_output, else this rank's [..., o] slice.

    Raises:
        ValueError: out_features is not divisible by the world size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, gather_output: bool = True):
        super().__init__()
        self._setup(in_features, out_features, gather_output)
        full = nn.Linear(in_features, out_features, bias=bias)
        rows = slice(self.rank * self.out_per_rank, (self.rank + 1) * self.out_per_rank)
        self.weight = nn.Parameter(full.weight.detach()[rows].clone())
        if bias:
            self.bias = nn.Parameter(full.bias.detach()[rows].clone())
        else:
            self.register_parameter("bias", None)

    def _setup(self, in_features: int, out_features: int, gather_output: bool) -> None:
        self.world_size = _world_size()
        self.rank = _rank()
        self.out_per_rank = _check_divisible(out_features, self.world_size, "out_features")
        self.in_features = in_features
        self.out_features = out_features
        self.gather_output = gather_output

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, gather_output: bool = True) -> "ColumnParallelLinear":
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._setup(linear.in_features, linear.out_features, gather_output)
        rows = slice(layer.rank * layer.out_per_rank, (layer.rank + 1) * layer.out_per_rank)
        layer.weight = nn.Parameter(linear.weight.detach()[rows].clone())
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach()[rows].clone())
        else:
            layer.register_parameter("bias", None)
        return layer

    def forward(self, x: Tensor) -> Tensor:
        x = CopyToParallel.apply(x)
        y = F.linear(x, self.weight, self.bias)
        if self.gather_output:
            y = GatherFromParallel.apply(y)
        return y

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features} "
            f"(local {self.out_per_rank}), bias={self.bias is not None}, "
            f"gather_output={self.gather_output}, rank={self.rank}/{self.world_size}"
        )


class RowParallelLinear(nn.Module):
    """A linear layer whose INPUT features are split across the ranks (Megatron-LM).

    Rank r of N holds columns [r*i, (r+1)*i) of the full weight (i = in_features // N) and
    the full bias. forward: split x unless input_is_parallel -> x_r @ W_r^T -> g (all-reduce)
    -> + bias, once.

    Raises:
        ValueError: in_features is not divisible by the world size.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, input_is_parallel: bool = True):
        super().__init__()
        self._setup(in_features, out_features, input_is_parallel)
        full = nn.Linear(in_features, out_features, bias=bias)
        cols = slice(self.rank * self.in_per_rank, (self.rank + 1) * self.in_per_rank)
        self.weight = nn.Parameter(full.weight.detach()[:, cols].clone())
        if bias:
            self.bias = nn.Parameter(full.bias.detach().clone())
        else:
            self.register_parameter("bias", None)

    def _setup(self, in_features: int, out_features: int, input_is_parallel: bool) -> None:
        self.world_size = _world_size()
        self.rank = _rank()
        self.in_per_rank = _check_divisible(in_features, self.world_size, "in_features")
        self.in_features = in_features
        self.out_features = out_features
        self.input_is_parallel = input_is_parallel

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, input_is_parallel: bool = True) -> "RowParallelLinear":
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._setup(linear.in_features, linear.out_features, input_is_parallel)
        cols = slice(layer.rank * layer.in_per_rank, (layer.rank + 1) * layer.in_per_rank)
        layer.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone())
        else:
            layer.register_parameter("bias", None)
        return layer

    def forward(self, x: Tensor) -> Tensor:
        if not self.input_is_parallel:
            x = ScatterToParallel.apply(x)
        y = ReduceFromParallel.apply(F.linear(x, self.weight))
        if self.bias is not None:
            y = y + self.bias
        return y

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features} (local {self.in_per_rank}), "
            f"out_features={self.out_features}, bias={self.bias is not None}, "
            f"input_is_parallel={self.input_is_parallel}, rank={self.rank}/{self.world_size}"
        )

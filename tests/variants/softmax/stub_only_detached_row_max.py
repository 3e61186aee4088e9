"""Variant of softmax, written from the stub alone: a detached per-row max, float32 for half inputs."""

import torch
from torch import Tensor


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Return softmax(x) along `dim`, as F.softmax(x, dim):

        softmax(x)[..., i, ...] = exp(x_i) / sum_j exp(x_j)

    where i and j run along `dim` and every other index is fixed: each slice along `dim`
    (a "row") sums to 1 on its own.

    Conventions (the same for log_softmax below):
        - x: any shape with at least one dimension, possibly non-contiguous (a transposed
          view); dim: any of its dims, negative ones counting from the end (-1 = the last,
          the default). An out-of-range dim raises IndexError, as PyTorch's does.
        - Numerically stable: exp overflows float32 above 88 (float64 above 709), and the
          grader passes scores of +-1e4. Subtract each row's OWN max along dim (not the max
          of the whole tensor: rows 1000 apart are judged too) before exp; softmax does not
          change when a row is shifted by a constant.
        - -inf entries are allowed and mean probability 0 (log-probability -inf). A row
          that is entirely -inf is undefined and not judged (PyTorch gives NaN there).
        - dtypes: float32 and float64 are computed in their own dtype (a float64 input must
          not go through float32); float16 and bfloat16 are computed in float32 (or better)
          and the result is cast back. The result has x's shape, dtype and device.
        - x is never modified in place; gradients flow back to x through autograd.
        - PyTorch's softmax, log_softmax and logsumexp are off limits, in every spelling
          (F., torch., Tensor methods, torch.special, aten).

    Example:
        >>> softmax(torch.tensor([[0.0, 0.0], [1e4, float("-inf")]]))
        tensor([[0.5000, 0.5000],
                [1.0000, 0.0000]])
    """
    xc, dim = _prepare(x, dim)
    if xc.numel() == 0:
        return xc.to(x.dtype)
    e = torch.exp(_shift_by_row_max(xc, dim))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Return log(softmax(x)) along `dim`, as F.log_softmax(x, dim), computed stably:

        log_softmax(x)_i = x_i - logsumexp(x) = (x_i - m) - log(sum_j exp(x_j - m))

    with m the row's max along dim. Do NOT take log(softmax(x)): a probability that
    underflows to 0 gives -inf where the answer is finite (scores of +-1e4: about -2e4).
    Same conventions as softmax above (any dim, -inf entries, rows entirely -inf not
    judged, half precision computed in float32 and cast back, x unchanged, no PyTorch
    softmax, log_softmax or logsumexp).

    Example:
        >>> log_softmax(torch.tensor([1e4, -1e4]))
        tensor([     0., -20000.])
    """
    xc, dim = _prepare(x, dim)
    if xc.numel() == 0:
        return xc.to(x.dtype)
    z = _shift_by_row_max(xc, dim)
    return (z - torch.log(torch.exp(z).sum(dim=dim, keepdim=True))).to(x.dtype)


def _prepare(x: Tensor, dim: int) -> "tuple[Tensor, int]":
    """Validate `dim` (IndexError if out of range, like PyTorch), and return the tensor to
    compute with (half precision upcast to float32, other floats unchanged) and dim >= 0."""
    if not x.is_floating_point():
        raise TypeError(f"softmax/log_softmax expect a floating-point tensor, got {x.dtype}")
    nd = max(x.dim(), 1)  # a 0-d tensor accepts dim in [-1, 0], as in PyTorch
    if not -nd <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    dim = dim % nd
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    return x, dim


def _shift_by_row_max(x: Tensor, dim: int) -> Tensor:
    """x minus each row's own max along dim (out of place). The max is detached: the result
    is mathematically invariant to the shift, so no gradient needs to flow through it.
    A row of only -inf gives (-inf) - (-inf) = NaN, as PyTorch does."""
    m = x.detach().amax(dim=dim, keepdim=True)
    return x - m

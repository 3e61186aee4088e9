"""Variant of layer_norm, written from the stub alone: stats helpers, leading-dim sums guarded against dim=()."""

import torch
from torch import Tensor


def _norm_dims(x: Tensor, normalized_shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return (normalized_shape as a tuple, the trailing dims of x it covers)."""
    if isinstance(normalized_shape, int):
        shape = (normalized_shape,)
    else:
        shape = tuple(int(s) for s in normalized_shape)
    k = len(shape)
    if k > x.dim() or tuple(x.shape[x.dim() - k:]) != shape:
        raise RuntimeError(
            f"normalized_shape {shape} does not match the trailing dims of input {tuple(x.shape)}"
        )
    dims = tuple(range(x.dim() - k, x.dim()))
    return shape, dims


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _mean(t: Tensor, dims: tuple[int, ...]) -> Tensor:
    # dim=() would reduce over everything in torch; no normalised dims means N = 1.
    return t.mean(dim=dims, keepdim=True) if dims else t.clone()


def _stats(xc: Tensor, dims: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """Mean and rstd = 1 / sqrt(biased var + eps) of xc over dims (kept for broadcasting)."""
    mean = _mean(xc, dims)
    centred = xc - mean
    var = _mean(centred * centred, dims)
    rstd = torch.rsqrt(var + eps)
    return mean, rstd


def layer_norm(
    x: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation, exactly as F.layer_norm (see the kata stub for the conventions)."""
    shape, dims = _norm_dims(x, normalized_shape)
    cdt = _compute_dtype(x.dtype)
    xc = x.to(cdt)

    mean, rstd = _stats(xc, dims, eps)
    y = (xc - mean) * rstd
    if weight is not None:
        y = y * weight.to(cdt)
    if bias is not None:
        y = y + bias.to(cdt)
    return y.to(x.dtype)


def layer_norm_backward(
    grad_output: Tensor,
    x: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Return (grad_input, grad_weight, grad_bias) of layer_norm, derived by hand.

    With x_hat = (x - mean) * rstd over a row of N elements and g = grad_x_hat:
        dx_hat[i]/dx[j] = rstd * (delta_ij - 1/N - x_hat[i] * x_hat[j] / N)
    so grad_x[j] = rstd * (g[j] - mean(g) - x_hat[j] * mean(g * x_hat)).
    """
    shape, dims = _norm_dims(x, normalized_shape)
    cdt = _compute_dtype(x.dtype)
    xc = x.to(cdt)
    go = grad_output.to(cdt)

    # Recompute what the forward would have saved.
    mean, rstd = _stats(xc, dims, eps)
    x_hat = (xc - mean) * rstd

    # Gradient reaching x_hat (through the weight, when there is one).
    if weight is not None:
        grad_x_hat = go * weight.to(cdt)
    else:
        grad_x_hat = go

    # Through x_hat = (x - mean) * rstd: direct term, the mean's term, the variance's term.
    grad_input = rstd * (
        grad_x_hat
        - _mean(grad_x_hat, dims)
        - x_hat * _mean(grad_x_hat * x_hat, dims)
    )
    grad_input = grad_input.to(x.dtype)

    if weight is None:
        return grad_input, None, None

    # Sum over every leading position (and only those).
    lead = tuple(range(x.dim() - len(shape)))
    if lead:
        grad_weight = (go * x_hat).sum(dim=lead)
        grad_bias = go.sum(dim=lead)
    else:
        grad_weight = go * x_hat
        grad_bias = go.clone()
    return grad_input, grad_weight.to(weight.dtype), grad_bias.to(weight.dtype)

"""Kata【激活函数：GELU（精确与 tanh 近似）和 SiLU】: GELU (exact and tanh) and SiLU, as F.gelu and F.silu."""

import math

import torch
from torch import Tensor


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """Return GELU(x) elementwise, as F.gelu(x, approximate=approximate):

        approximate="none" (exact):  x * Phi(x) = x * 0.5 * (1 + erf(x / sqrt(2)))
        approximate="tanh":          0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))

    Phi is the standard normal CDF. The two are different functions (they differ by up to
    4.7e-4 near |x| = 2): "none" must be the exact one, which GPT-2's and BERT's checkpoints
    were not trained with, and "tanh" the approximation they were.

    The same for silu below:
        - x: a float16, bfloat16, float32 or float64 tensor of any shape, 0-d included,
          possibly non-contiguous (a transposed view).
        - The result has x's shape and dtype. Errors of float32 arithmetic are accepted
          (about 1e-7 relative, and about 1e-7 * |x| absolute: 1 + erf(x / sqrt(2)) loses
          digits for negative x).
        - |x| up to 1e4 (the result is x or -0 out there: no NaN, no inf) and down to 1e-30
          (the result is about x / 2, not 0).
        - PyTorch's GELU and SiLU are off limits in every spelling (F.gelu, F.silu, nn.GELU,
          nn.SiLU, Tensor methods, aten); every other operation is fine (torch.erf,
          torch.erfc, torch.tanh, torch.sigmoid...), and so is any exact rewriting of the
          formulas (0.5 * (1 + tanh(u)) = sigmoid(2u), say).

    Conventions (judged apart from the math, as production code would need them):
        - any other `approximate` raises ValueError (F.gelu raises RuntimeError).
        - float16 and bfloat16 are computed in float32 (or better) and the result is cast
          back to x's dtype. (x**3 overflows float16 above 40.)
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the result is on x's device.
        - x is never changed in place.
        - gradients flow back to x through autograd (no .detach(), .item(), numpy or
          torch.no_grad() on the way).

    Example:
        >>> gelu(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([-0.1587,  0.0000,  0.8413])
        >>> gelu(torch.tensor([-1.0, 0.0, 1.0]), approximate="tanh")
        tensor([-0.1588,  0.0000,  0.8412])
    """
    # TODO: refuse an unknown `approximate` with ValueError.
    # TODO: compute in float32 for float16/bfloat16, in x's own dtype otherwise.
    # TODO: "tanh": the tanh approximation of the normal CDF (GPT-2's gelu_new); "none": the exact
    # TODO: form, x times the normal CDF. Cast the result back to x's dtype.
    raise NotImplementedError


def silu(x: Tensor) -> Tensor:
    """Return SiLU(x) = x * sigmoid(x) elementwise (also called swish), as F.silu(x).

    Same rules and conventions as gelu above: any shape, |x| from 1e-30 to 1e4 (no NaN, no
    inf), no PyTorch SiLU; half precision computed in float32 and cast back, float64 in
    float64, x's device, x unchanged, gradients through autograd.

    Example:
        >>> silu(torch.tensor([-1.0, 0.0, 1.0]))
        tensor([-0.2689,  0.0000,  0.7311])
    """
    # TODO: the same computation dtype as gelu; then x times sigmoid(x).
    raise NotImplementedError

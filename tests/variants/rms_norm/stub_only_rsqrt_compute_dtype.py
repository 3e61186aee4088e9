"""Variant of rms_norm, written from the stub alone: rsqrt in the computation dtype, the weight before casting back."""

import numbers

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square layer normalisation, exactly as nn.RMSNorm.

    __init__(normalized_shape, eps=None, elementwise_affine=True)
        - normalized_shape: an int, or a sequence of ints (tuple, list, torch.Size): the
          shape of the trailing dims to normalise over; an int n means (n,). Keep it as a
          tuple in self.normalized_shape.
        - eps: a float added to the mean square, INSIDE the square root. Keep it as given in
          self.eps (None stays None). eps=None means the machine epsilon of the
          computation dtype (below): torch.finfo(torch.float32).eps for float16, bfloat16
          and float32 inputs, torch.finfo(torch.float64).eps for float64 inputs.
        - elementwise_affine: kept in self.elementwise_affine. When True, self.weight is an
          nn.Parameter of shape normalized_shape, initialised to ones (the grader copies
          random weights into it, by name). When False the module has no parameter at all
          and self.weight is None (register_parameter("weight", None), as nn.RMSNorm).

    forward(x [..., *normalized_shape]) -> [..., *normalized_shape], x's dtype and device
        y = x / sqrt(mean(x ** 2) + eps) * weight
        - the mean is over ALL the last len(normalized_shape) dims at once (not only the last
          dim), one mean per position of the leading dims; x may have any number of leading
          dims, none included.
        - it is the mean SQUARE: nothing is subtracted (unlike LayerNorm's variance), and
          there is no bias.
        - computation dtype: float16 and bfloat16 inputs are computed in float32 and the
          result is cast back to the input's dtype; float32 and float64 inputs in their own
          dtype (a float64 input must not go through float32). The weight may be applied
          before or after casting back.
        - eps matters: inputs of tiny magnitude (around 1e-4, where mean(x ** 2) is of the
          order of eps) and large ones are judged, and so are explicit values of eps.
        - the input is never modified in place; gradients flow to x and to the weight.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        if k > x.dim() or tuple(x.shape[x.dim() - k:]) != self.normalized_shape:
            raise ValueError(
                f"expected input with trailing shape {self.normalized_shape}, got {tuple(x.shape)}")

        # Half-precision inputs are computed in float32; float32/float64 in their own dtype.
        if x.dtype in (torch.float16, torch.bfloat16):
            compute_dtype = torch.float32
        else:
            compute_dtype = x.dtype
        eps = torch.finfo(compute_dtype).eps if self.eps is None else self.eps

        xc = x.to(compute_dtype)  # new tensor (or x itself, which is never written to)
        sq = xc * xc
        if k > 0:
            ms = sq.mean(dim=tuple(range(-k, 0)), keepdim=True)
        else:  # an empty normalized_shape normalises each element on its own
            ms = sq
        y = xc * torch.rsqrt(ms + eps)
        if self.weight is not None:
            y = y * self.weight.to(compute_dtype)
        return y.to(x.dtype)

"""Kata【RMSNorm（均方根层归一化，同 nn.RMSNorm）】: RMSNorm, the root-mean-square normalisation of Llama-style decoders, as nn.RMSNorm."""

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
        - computation dtype: float32 inputs in float32, float64 inputs in float64 (eps=None
          then means float64's eps); float16 and bfloat16 inputs in float32, the result cast
          back (see the conventions). The weight may be applied before or after casting back.
        - eps matters: inputs of tiny magnitude (around 1e-4, where mean(x ** 2) is of the
          order of eps) and large ones are judged, and so are explicit values of eps.

    Conventions (judged apart from the math, as production code would need them):
        - float16 and bfloat16 inputs are computed in float32 (eps=None: float32's eps) and
          the result is cast back to the input's dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - elementwise_affine=False: no parameter at all, and self.weight is None.
        - self.normalized_shape (a tuple), self.eps and self.elementwise_affine keep the
          settings as nn.RMSNorm does; the weight starts at ones, a trainable nn.Parameter.
        - autograd sees every step: gradients flow to x and to the weight.
        - results follow the input's device.
        - the input is never modified in place.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True):
        super().__init__()
        # TODO: an int n means (n,); keep the shape as a tuple, and eps and elementwise_affine as given.
        # TODO: a weight of ones of shape normalized_shape with elementwise_affine, else weight None.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: the computation dtype: float32 for half inputs, the input's own otherwise;
        # TODO: eps=None means that dtype's machine epsilon.
        # TODO: the mean of x ** 2 over the trailing len(normalized_shape) dims, kept for broadcasting.
        # TODO: divide by the root of (mean square + eps), cast back to x's dtype, scale by the weight.
        raise NotImplementedError

"""Kata【层归一化：前向同 F.layer_norm，反向手写】: layer normalisation, its forward as F.layer_norm and its backward pass by hand."""

import torch
from torch import Tensor


def layer_norm(
    x: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation, exactly as F.layer_norm (and nn.LayerNorm's forward).

    x [..., *normalized_shape] -> y [..., *normalized_shape], x's dtype and device:
        mean = the mean of x over the normalised dims           (one per leading position)
        var  = the mean of (x - mean) ** 2 over the same dims   (the BIASED variance: / N)
        y    = (x - mean) / sqrt(var + eps) * weight + bias

    - normalized_shape: an int n, meaning (n,), or a sequence of ints (tuple, list,
      torch.Size), as nn.LayerNorm accepts: the shape of x's trailing dims. The mean and the
      variance are taken over ALL those trailing dims at once (not only the last dim), one
      per position of the leading dims "..."; x may have any number of leading dims, none
      included (then the whole input is one row).
    - weight and bias: None, or tensors of shape normalized_shape in x's dtype. Each is
      optional on its own: weight None means no scaling, bias None means nothing added.
    - eps: added to the variance INSIDE the square root. It matters: inputs of small
      variance (rows whose spread is around 3e-3, a variance of the order of eps) are
      judged, with eps=1e-5 (the default) and explicit values.
    - a row whose variance is 0 (one normalised element, say) gives x - mean = 0: the output
      is the bias there (0 without one), never NaN.
    - errors of float32 arithmetic are accepted (for float64 inputs too: see the float64
      convention below); print nothing.

    Conventions (judged apart from the math, as production code would need them):
        - float16 and bfloat16 inputs are computed in float32 and the result cast back to
          the input's dtype (rows with a spread of 300, whose squares overflow float16, are
          judged).
        - float64 inputs are computed in float64 throughout (no step in float32).
        - results follow the inputs' device.
        - x, weight and bias (and layer_norm_backward's grad_output) are never changed in
          place.

    Example:
        >>> layer_norm(torch.tensor([[1.0, 2.0, 3.0]]), 3)
        tensor([[-1.2247,  0.0000,  1.2247]])
    """
    # TODO: an int n means (n,); the normalised dims are the last len(normalized_shape) dims.
    # TODO: the computation dtype: float32 for half inputs, the input's own otherwise.
    # TODO: the mean and the biased variance over those dims, kept for broadcasting.
    # TODO: normalise (eps inside the square root), then the weight and the bias when given.
    raise NotImplementedError


def layer_norm_backward(
    grad_output: Tensor,
    x: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Return (grad_input, grad_weight, grad_bias) of layer_norm, derived and written by hand.

    The forward pass being differentiated is layer_norm(x, normalized_shape, weight, bias,
    eps) above, with a bias exactly when there is a weight (nn.LayerNorm's
    elementwise_affine). grad_output is dLoss/d(y); return:
        grad_input  = dLoss/dx       [..., *normalized_shape], x's dtype
        grad_weight = dLoss/dweight  [*normalized_shape], weight's dtype
        grad_bias   = dLoss/dbias    [*normalized_shape], weight's dtype
    When weight is None (no weight and no bias), grad_weight and grad_bias are both None;
    when it is given, both are tensors. The bias itself is not an argument: no gradient
    depends on its value.

    Same rules as layer_norm: normalized_shape an int or a sequence of ints, any number of
    leading dims (none included), the biased variance, eps inside the square root
    (small-variance inputs and explicit eps values are judged). A row of one normalised
    element gives grad_input 0 there (x_hat is 0 and stays 0).

    Conventions (judged apart from the math, as production code would need them):
        - those of layer_norm above, for every gradient: half precision computed in float32
          and returned in its own dtype, float64 computed in float64 throughout, the
          inputs' device, the inputs left unchanged.
        - layer_norm_backward works under torch.no_grad(), as the grader times it (no step
          may need autograd).

    Rules: recompute what the forward pass would have saved (the mean, 1 / sqrt(var + eps),
    x_hat); do not use autograd in any form (torch.autograd.grad, .backward(), torch.func,
    forward-mode AD): the tests look for it, and call this function with tensors that do
    not require grad. Do not modify the inputs.

    What to derive, one step at a time (each step is a line or two of tensor code):
        1. grad_bias and grad_weight: y = x_hat * weight + bias, where x_hat is the
           normalised x. Each weight and bias element is used at every position of the
           leading dims: sum over all of them (and only them).
        2. grad_x_hat: the gradient reaching x_hat, through the weight.
        3. grad_input: x_hat = (x - mean) * rstd, and both mean and rstd depend on every x
           of the row. Write dx_hat[i] / dx[j] for one row (N elements, rstd = 1 /
           sqrt(var + eps)) and apply it to grad_x_hat without building an [N, N] matrix:
           besides rstd * grad_x_hat, one term comes through the mean and one through the
           variance, each a mean over the row.

    Example:
        >>> x = torch.tensor([[1.0, 2.0, 3.0]]); g = torch.tensor([[1.0, 0.0, 0.0]])
        >>> grad_input, grad_weight, grad_bias = layer_norm_backward(g, x, 3, torch.ones(3))
        >>> grad_input
        tensor([[ 0.2041, -0.4082,  0.2041]])
        >>> grad_weight, grad_bias
        (tensor([-1.2247,  0.0000,  0.0000]), tensor([1., 0., 0.]))
    """
    # TODO: the normalised dims and the computation dtype, as in the forward.
    # TODO: recompute the forward's mean, rstd = 1 / sqrt(var + eps) and x_hat.
    # TODO: grad_x_hat, then grad_input: rstd times grad_x_hat less its mean over the row
    # TODO: and less x_hat times the row's mean of grad_x_hat * x_hat.
    # TODO: grad_weight and grad_bias: sums over every leading position (none: one row).
    raise NotImplementedError

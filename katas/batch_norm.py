"""Kata【批归一化：训练与评估（同 nn.BatchNorm1d/2d/3d）】: BatchNorm, training and evaluation, as nn.BatchNorm1d/2d/3d."""

import torch
from torch import Tensor, nn


class BatchNorm(nn.Module):
    """Batch normalisation over the channel dim 1, exactly as nn.BatchNorm1d/2d/3d (one class
    for every rank).

    __init__(num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True)
        - num_features: C, the size of dim 1 of the input.
        - eps: added to the variance, INSIDE the square root.
        - momentum: the weight of the NEW batch in the running averages (PyTorch's
          convention, not Keras'): running = (1 - f) * running + f * batch, f = momentum;
          momentum=None means a cumulative average, f = 1 / num_batches_tracked (counted
          after this batch's increment: the first batch gets f = 1).
        - affine=True: self.weight = an nn.Parameter of ones(C) and self.bias = one of
          zeros(C); affine=False: no parameter at all, self.weight and self.bias are None
          (register_parameter(name, None)).
        - track_running_stats=True: three buffers (register_buffer), running_mean =
          zeros(C), running_var = ones(C), num_batches_tracked = tensor(0, dtype=torch.long);
          track_running_stats=False: the three are registered as None.
        The grader copies random values into weight, bias and the buffers, by these names.

    forward(x [N, C, *]) -> [N, C, *], x's shape, dtype and device
        x has any rank >= 2: [N, C], [N, C, L], [N, C, H, W], [N, C, D, H, W].
        n = the number of values per channel (N times the sizes of dims 2, 3, ...).
        - batch statistics, used when self.training or not track_running_stats: per channel,
          the mean and the BIASED variance (divided by n) over every dim except dim 1;
          y = (x - mean) / sqrt(var + eps) * weight + bias (weight and bias per channel,
          broadcast along dim 1; left out without affine).
        - in training with running stats, after each batch: num_batches_tracked += 1, then
          running_mean = (1 - f) * running_mean + f * mean and
          running_var = (1 - f) * running_var + f * var * n / (n - 1): the UNBIASED variance
          goes into the running average, the biased one normalises.
        - in evaluation (self.training False) with running stats: y normalises by
          running_mean and running_var, and the buffers are left untouched.
        - gradients reach x, weight and bias through autograd, in training through the
          batch's mean and variance too.
        - a channel whose values are all equal has variance 0: eps keeps the result and the
          gradients finite.

    Conventions (judged apart from the math, as production code would need them):
        - training with one value per channel (n == 1, e.g. x of shape [1, C]) raises ValueError,
          as PyTorch ("Expected more than 1 value per channel when training"); so does
          evaluation without running stats; evaluation with running stats accepts it.
        - running_mean, running_var and num_batches_tracked are registered buffers (state_dict
          keys as PyTorch's), updated without autograd history (torch.no_grad() or .detach()):
          after a training call they have no grad_fn and do not require grad.
        - a new module starts as PyTorch's: weight ones, bias zeros, running_mean zeros,
          running_var ones, num_batches_tracked tensor(0) (torch.long); None without affine or running stats.
        - float16 and bfloat16 inputs go through a float32 module (its parameters and buffers
          stay float32), computed in float32, the result cast back to x's dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - results follow the input's device (the module moved there with .to(device)).
        - the input is never modified in place.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ):
        super().__init__()
        # TODO: keep the settings, as nn.BatchNorm*d does.
        # TODO: weight (ones) and bias (zeros) Parameters with affine, else both registered as None.
        # TODO: buffers (not Parameters: no gradient, but saved in state_dict and moved by .to()):
        # TODO: running_mean zeros, running_var ones, num_batches_tracked 0 (long); else all None.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: the computation dtype: float32 for half inputs (the module is float32), x's own otherwise.
        # TODO: the statistics are per channel: reduce over every dim but 1, keeping dims to broadcast.
        # TODO: batch statistics in training, and in evaluation without running stats:
        # TODO: n == 1 has no variance to speak of: raise ValueError, as PyTorch does.
            # TODO: in training, update the running averages in place, outside autograd: count the
            # TODO: batch, f = momentum (None: 1 / count), and the UNBIASED variance goes in.
            # TODO: evaluation with running stats: normalise by them, and leave them untouched.
        # TODO: normalise (eps inside the square root), then scale and shift per channel; cast back.
        raise NotImplementedError

"""Tolerances, (rtol, atol) of torch.testing.assert_close, per dtype of the result.

SINGLE_OP is for one operation compared with PyTorch's in the same dtype: PyTorch's own
defaults for float32 and float64; for half precision a few ulps (float16's ulp at 1.0 is
9.8e-4, bfloat16's 7.8e-3): a correct kata that rounds in another order lands within
them, a wrong scale or mask does not. Katas whose errors compound (layers, backward
passes) declare wider ones in their spec, each with how it was measured."""

import torch


def per_dtype(**pairs: tuple[float, float]) -> dict:
    """A tolerance table, {dtype: {"rtol", "atol"}}, from (rtol, atol) pairs named by dtype:
    per_dtype(float64=(1e-7, 1e-7), float32=(1.3e-6, 1e-5))."""
    return {getattr(torch, name): {"rtol": rtol, "atol": atol} for name, (rtol, atol) in pairs.items()}


SINGLE_OP = per_dtype(float64=(1e-7, 1e-7), float32=(1.3e-6, 1e-5), float16=(4e-3, 4e-3), bfloat16=(3e-2, 3e-2))

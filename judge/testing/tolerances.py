"""Tolerances, (rtol, atol) of torch.testing.assert_close, per dtype of the result.

SINGLE_OP is for one operation compared with PyTorch's in the same dtype: PyTorch's own
defaults for float32 and float64; for half precision a few ulps (float16's ulp at 1.0 is
9.8e-4, bfloat16's 7.8e-3): a correct kata that rounds in another order lands within
them, a wrong scale or mask does not. Katas whose errors compound (layers, backward
passes) declare wider ones in their spec, each with how it was measured."""

import torch

SINGLE_OP = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float16: {"rtol": 4e-3, "atol": 4e-3},
    torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2},
}

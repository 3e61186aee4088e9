"""Kata【SwiGLU 前馈网络（Llama 的 MLP）】: the SwiGLU feed-forward block of Llama (a SiLU-gated linear unit)."""

import torch.nn.functional as F
from torch import Tensor, nn


class SwiGLU(nn.Module):
    """Llama's feed-forward block: down_proj(silu(gate_proj(x)) * up_proj(x)).

    Sizes: C = d_model, d_ff the hidden width.

    __init__(d_model, d_ff=None, multiple_of=256, bias=False)
        - d_ff=None follows Llama: start from int(2 * 4 * d_model / 3) (two thirds of the
          usual 4 * d_model, truncated to an integer), then round it UP to the next multiple
          of multiple_of; a value that is already a multiple stays as it is. Examples:
          d_model=10, multiple_of=8: int(26.67) = 26 -> 32; d_model=12, multiple_of=32:
          32 -> 32; d_model=4096, multiple_of=256: 10922 -> 11008 (Llama-7B).
        - an explicit d_ff is used as given: never rounded, whatever multiple_of says.
        - three submodules, named as the grader copies weights into them, in nn.Linear
          layout (weight [out, in]):
            gate_proj: nn.Linear(d_model, d_ff, bias=bias)   its output goes through SiLU
            up_proj:   nn.Linear(d_model, d_ff, bias=bias)   its output is NOT activated
            down_proj: nn.Linear(d_ff, d_model, bias=bias)   back to d_model
        - bias=True puts a bias on all three projections; bias=False (the default, as in
          Llama) on none of them.

    forward(x [..., C]) -> [..., C]
        - any number of leading dimensions, none included: [B, T, C], [T, C], [A, B, T, C]
          and a single vector [C] all work; they pass through unchanged.
        - silu(z) = z * sigmoid(z) (F.silu), applied to gate_proj(x) only, then multiplied
          elementwise by up_proj(x), then projected back by down_proj.
        - the output has x's dtype.

    Reference: nn.Linear and F.silu composed as above, in float64, every weight and bias random.

    Conventions (judged apart from the math, as production code would need them):
        - float16 and bfloat16 inputs work, in their own dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - results follow the input's device.
        - x is never modified in place.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, multiple_of: int = 256, bias: bool = False):
        super().__init__()
        # TODO: d_ff=None: int(2 * 4 * d_model / 3), rounded UP to a multiple of multiple_of.
        # TODO: gate_proj and up_proj (d_model -> d_ff), down_proj (d_ff -> d_model), all with bias=bias.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: gate with SiLU, multiply by the up projection, project back down to d_model.
        raise NotImplementedError

"""Kata【正弦位置编码】: sinusoidal positional encoding ("Attention Is All You Need", section 3.5)."""

import torch
from torch import Tensor


def sinusoidal_positional_encoding(
    num_positions: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Return the sinusoidal positional-encoding table, shape [num_positions, d_model].

        PE[p, 2i]   = sin(p / base ** (2i / d_model))
        PE[p, 2i+1] = cos(p / base ** (2i / d_model))

    Sines fill the even columns and cosines the odd ones, interleaved as in the paper
    (not all sines in one half and all cosines in the other). Row p encodes position p,
    counting from 0.

    Args:
        num_positions: number of positions (rows).
        d_model: embedding size (columns). An odd d_model raises ValueError.
        base: wavelength base; 10000 in the paper.
        dtype: dtype of the result. Compute the angles in float32 (or float64) and cast
            at the end: float16 cannot even represent position 2049 exactly. The values
            are judged to float32 accuracy whatever the dtype (float64 see below).
        device: device of the result (None means the default device).

    Conventions (judged apart from the math, as production code would need them):
        - float16 and bfloat16 tables take their angles in float32 (or float64) and are
          cast at the end.
        - float64 inputs are computed in float64 throughout (no step in float32). Here: a
          float64 table is computed in float64, to float64's accuracy.
        - an odd d_model raises ValueError.
        - the table is built on `device`.

    Example:
        >>> sinusoidal_positional_encoding(2, 4)
        tensor([[0.0000, 1.0000, 0.0000, 1.0000],
                [0.8415, 0.5403, 0.0100, 0.9999]])
    """
    ### BEGIN SOLUTION
    # TODO: reject an odd d_model with a ValueError.
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    # TODO: angle[p, i] = p / base ** (2i / d_model), in float32 or better.
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half is too coarse for angles
    position = torch.arange(num_positions, dtype=work, device=device)  # (P,)
    two_i = torch.arange(0, d_model, 2, dtype=work, device=device)  # (D/2,)
    angle = position[:, None] / base ** (two_i / d_model)  # (P, D/2)
    # TODO: sines in the even columns, cosines in the odd columns; cast to dtype.
    pe = torch.empty(num_positions, d_model, dtype=work, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.to(dtype)
    ### END SOLUTION

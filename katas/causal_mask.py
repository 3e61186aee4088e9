"""Kata【因果掩码（后续位置掩码）】: the causal ("subsequent") mask of a decoder."""

import torch
from torch import Tensor


def causal_mask(seq_len: int, *, device: torch.device | str | None = None) -> Tensor:
    """Return a boolean causal mask of shape [seq_len, seq_len]: True where attention is blocked.

    mask[i, j] is True when j > i: query i may not look at a future key j. The diagonal
    stays False (a position sees itself). This is the boolean form of
    nn.Transformer.generate_square_subsequent_mask(seq_len), whose blocked entries are
    -inf, and the polarity of the `attn_mask` of nn.MultiheadAttention (True = blocked).
    Careful: F.scaled_dot_product_attention uses the opposite polarity (True = may attend).

    Args:
        seq_len: sequence length.
        device: device of the result (None means the default device).

    Example:
        >>> causal_mask(3)
        tensor([[False,  True,  True],
                [False, False,  True],
                [False, False, False]])
    """
    # TODO: True strictly above the diagonal, as a torch.bool tensor on `device`.
    raise NotImplementedError

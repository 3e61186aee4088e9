"""Kata【根据长度构造键填充掩码】: a key-padding mask from sequence lengths."""

import torch
from torch import Tensor


def padding_mask(lengths: Tensor | list[int], max_len: int | None = None) -> Tensor:
    """Return a boolean padding mask of shape [B, max_len]: True at padded positions.

    mask[b, t] is True when t >= lengths[b], i.e. position t of sequence b is padding.
    This is the `key_padding_mask` convention of nn.MultiheadAttention and nn.Transformer*
    (True = ignore this key). Careful: F.scaled_dot_product_attention uses the opposite
    polarity (True = may attend).

    Args:
        lengths: the B sequence lengths, a 1-D integer tensor or a list of ints.
        max_len: number of columns; defaults to max(lengths). It may be larger than
            every length (extra padding).

    Returns:
        A torch.bool tensor [B, max_len] on the device of `lengths` (CPU for a list).

    Example:
        >>> padding_mask(torch.tensor([1, 3]), max_len=4)
        tensor([[False,  True,  True,  True],
                [False, False, False,  True]])

    Conventions (judged apart from the math, as production code would need them):
        - lengths may also be a list of ints (the result is then on the CPU).
        - the result is on the device of `lengths`.
        - `lengths` is never changed in place.
    """
    ### BEGIN SOLUTION
    # TODO: accept a list of ints as well as a 1-D tensor.
    lengths = torch.as_tensor(lengths)
    # TODO: max_len defaults to the longest sequence.
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() > 0 else 0
    # TODO: compare every position with every length, by broadcasting.
    positions = torch.arange(max_len, device=lengths.device)  # (T,)
    return positions[None, :] >= lengths[:, None]  # (B, T)
    ### END SOLUTION

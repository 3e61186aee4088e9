"""Ring all-reduce from point-to-point sends and receives (stub-only attempt)."""

import torch
import torch.distributed as dist
from torch import Tensor


def _swap(send_buf, recv_buf, right: int, left: int) -> None:
    """Post the send to the right and the receive from the left together, then wait on both.

    A None buffer (an empty chunk) means no message in that direction.
    """
    pending = []
    if send_buf is not None:
        pending.append(dist.isend(send_buf, dst=right))
    if recv_buf is not None:
        pending.append(dist.irecv(recv_buf, src=left))
    for work in pending:
        work.wait()


def ring_all_reduce(tensor: Tensor) -> Tensor:
    """Return the element-wise sum of `tensor` over every rank, as ring all-reduce computes it.

    Reduce-scatter then all-gather around the ring, one tensor_split chunk per message,
    sending only to (rank + 1) % N and receiving only from (rank - 1) % N.
    """
    n = dist.get_world_size()
    rank = dist.get_rank()

    # Our own working copy: flat, contiguous, same dtype; the input is never touched.
    acc = tensor.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
    if n == 1 or acc.numel() == 0:
        return acc.reshape(tensor.shape)

    right, left = (rank + 1) % n, (rank - 1) % n
    pieces = torch.tensor_split(acc, n)  # views into acc

    def nonempty(t: Tensor):
        return t if t.numel() > 0 else None

    # Reduce-scatter: after N-1 steps rank r owns the full sum of chunk (r + 1) % N.
    for step in range(n - 1):
        out_idx = (rank - step) % n
        in_idx = (rank - step - 1) % n
        incoming = pieces[in_idx]
        landing = torch.empty_like(incoming) if incoming.numel() > 0 else None
        _swap(nonempty(pieces[out_idx]), landing, right, left)
        if landing is not None:
            incoming.add_(landing)

    # All-gather: pass the finished chunks around; each received one overwrites ours.
    for step in range(n - 1):
        out_idx = (rank + 1 - step) % n
        in_idx = (rank - step) % n
        incoming = pieces[in_idx]
        landing = torch.empty_like(incoming) if incoming.numel() > 0 else None
        _swap(nonempty(pieces[out_idx]), landing, right, left)
        if landing is not None:
            incoming.copy_(landing)

    return acc.reshape(tensor.shape)

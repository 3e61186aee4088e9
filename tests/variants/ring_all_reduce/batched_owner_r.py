"""ring_all_reduce in another style: dist.batch_isend_irecv, and a schedule in which rank r
ends the reduce-scatter owning chunk r (not (r + 1) % N)."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor):
    n, r = dist.get_world_size(), dist.get_rank()
    out = tensor.detach().clone().contiguous().view(-1)
    if n == 1:
        return out.view(tensor.shape)
    parts = list(out.tensor_split(n))
    nxt, prv = (r + 1) % n, (r + n - 1) % n

    def step(send_idx, recv_buf):
        ops = []
        if parts[send_idx].numel() > 0:
            ops.append(dist.P2POp(dist.isend, parts[send_idx], nxt))
        if recv_buf.numel() > 0:
            ops.append(dist.P2POp(dist.irecv, recv_buf, prv))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    # reduce-scatter: at step s, send chunk (r - 1 - s) and accumulate chunk (r - 2 - s)
    for s in range(n - 1):
        send_idx, recv_idx = (r - 1 - s) % n, (r - 2 - s) % n
        buf = torch.zeros_like(parts[recv_idx])
        step(send_idx, buf)
        parts[recv_idx].add_(buf)
    # now rank r owns chunk r; all-gather: send chunk (r - s), receive chunk (r - 1 - s)
    for s in range(n - 1):
        step((r - s) % n, parts[(r - 1 - s) % n])
    return out.view(tensor.shape)

"""Message accounting for the distributed katas: the communication operators a rank calls,
with their peer and size, as torch's c10d operators see them.

dist.send reaches c10d::send once whichever Python function called it (dist.send itself
calls isend), and so do a process group's own methods: a dispatch mode in the rank logs
every c10d operator while the kata runs. It is the kata's word (docs/guide.md): a mode
follows the thread that entered it, so the distributed katas' rules start no thread.
"""

from __future__ import annotations

import contextlib

POINT_TO_POINT = {"send": "send", "recv_": "recv"}


@contextlib.contextmanager
def messages():
    """Inside: every c10d operator called is logged as (what, peer, elements): ("send", 1, 5),
    ("recv", 3, 5); a collective as (its operator's name, -1, elements)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    log: list[tuple[str, int, int]] = []

    class Accounting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "c10d":
                name = func._opname
                tensors = args[0] if args and isinstance(args[0], (list, tuple)) else []
                elements = sum(t.numel() for t in tensors if hasattr(t, "numel"))
                peer = args[2] if name in POINT_TO_POINT and len(args) > 2 else -1
                log.append((POINT_TO_POINT.get(name, name), int(peer), int(elements)))
            return func(*args, **(kwargs or {}))

    with Accounting():
        yield log

"""A tracer for the katas whose point is structural (what is materialised): a
TorchDispatchMode that records the largest tensor a call creates and the scores it
computes. It runs in the kata process, inside a scenario; what it saw comes back as data,
the kata's word (docs/guide.md, "What the judge guarantees"). A dispatch mode does not
follow a new thread: a kata traced with it declares Rules(threads=False).

Used by flash_attention (no [..., L, S] tensor, each score once) and
sliding_window_attention (no tensor beyond the band's bound)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode  # the tests may trace; the kata may not
from torch.utils._pytree import tree_flatten

from judge.language import pick
from judge.testing.checks import describe

aten = torch.ops.aten

# The matrix products as the dispatch mode sees them (matmul, einsum, tensordot and linear
# decompose into these), with the index of the first factor: its last dimension is the one
# contracted.
PRODUCTS = {
    aten.mm: 0,
    aten.bmm: 0,
    aten.mv: 0,
    aten.dot: 0,
    aten.vdot: 0,
    aten.addmm: 1,
    aten.baddbmm: 1,
    aten.addbmm: 1,
    aten.addmv: 1,
}


class CreatedTensors(TorchDispatchMode):
    """Context manager: records what the ops run under it create. `largest` (elements, then
    bytes per element: a float [L, S] before a boolean one), `largest_bytes` and
    `largest_what` describe the largest new tensor: a view or an in-place result shares an
    input's storage and creates nothing; with `inputs_numel`, a tensor with as many elements
    as one of the inputs (a copy, a cast or a contiguous transpose of it) is not counted.
    `scores` counts the elements of the matrix products that contract over `head_size` (the
    scores q . k). `seen()`: all of it, as data."""

    def __init__(self, head_size: int | None = None, *, inputs_numel: tuple[int, ...] = ()):
        super().__init__()
        self.head_size = head_size
        self.inputs_numel = frozenset(inputs_numel)
        self.largest, self.largest_bytes, self.largest_what, self.scores = (0, 0), 0, "nothing", 0
        self.opaque = ""  # the first operator of another namespace than aten's (a custom op)

    def seen(self) -> dict:
        names = ("largest", "largest_bytes", "largest_what", "scores", "opaque")
        return {name: getattr(self, name) for name in names}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace not in ("aten", "prims") and not self.opaque:
            self.opaque = str(func)  # what runs inside it is not seen here
        result = func(*args, **kwargs)
        first = PRODUCTS.get(func.overloadpacket)
        if first is not None and self.head_size is not None and isinstance(result, torch.Tensor):
            factor = args[first]
            if isinstance(factor, torch.Tensor) and factor.dim() and factor.size(-1) == self.head_size:
                self.scores += result.numel()
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor) and t.numel() and not t.is_meta
        }
        for t in tree_flatten(result)[0]:
            if not isinstance(t, torch.Tensor) or t.is_meta or not t.numel():
                continue
            if t.untyped_storage().data_ptr() in inputs or t.numel() in self.inputs_numel:
                continue
            if (t.numel(), t.element_size()) <= self.largest:
                continue
            self.largest, self.largest_bytes = (t.numel(), t.element_size()), t.numel() * t.element_size()
            self.largest_what = pick(
                f"{describe(t)}, made by {func.overloadpacket.__name__}",
                f"{describe(t)}，由 {func.overloadpacket.__name__} 创建",
            )
        return result


def largest_tensor_note(call, naive_bytes: int, *, inputs_numel: tuple[int, ...] = ()) -> dict:
    """A benchmark's notes: the largest tensor `call()` creates (no grad, traced) next to the
    `naive_bytes` of the [..., L, S] scores a naive attention would make."""
    tracer = CreatedTensors(inputs_numel=inputs_numel)
    with torch.no_grad(), tracer:
        call()
    return {"largest tensor": f"{tracer.largest_bytes / 1e6:.2g} MB vs {naive_bytes / 1e6:.2g} MB naive scores"}

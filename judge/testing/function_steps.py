"""A torch.autograd.Function the learner writes, judged without autograd where the kata runs.

Where a kata forbids autograd, the kata process has none (judge.forbidden), so the judge calls
the Function's steps itself, as autograd's engine would: forward (or forward and
setup_context) with a stand-in for autograd's ctx, then backward with the same ctx. What the
steps return comes back as data. In the judging process, `Steps` puts the two calls back
together as an autograd.Function, so torch.autograd.gradcheck can test them there.
"""

from __future__ import annotations

import torch

from judge.testing.scenarios import scenario


class Ctx:
    """What autograd hands forward and backward: save_for_backward and saved_tensors (which,
    as autograd's, refuse a tensor changed in place since it was saved), needs_input_grad,
    mark_non_differentiable, mark_dirty, set_materialize_grads, and any attribute."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple = ()
        self.versions: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self.to_save = tensors
        self.versions = tuple(None if t is None else t._version for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        for index, (tensor, version) in enumerate(zip(self.to_save, self.versions)):
            if tensor is not None and tensor._version != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: the tensor saved at position {index} was changed after save_for_backward"
                )
        return self.to_save

    def mark_non_differentiable(self, *tensors) -> None:
        self.non_differentiable = tensors

    def mark_dirty(self, *tensors) -> None:
        self.dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


@scenario
def steps(kata, symbol: str, tensors: tuple, others: tuple, grad_output) -> dict:
    """kata.<symbol> (an autograd.Function) on `tensors` (which need gradients) then `others`:
    its forward with a stand-in ctx, then, given grad_output, its backward. Returns the output,
    what backward returned, the shapes of the saved tensors, and the inputs (and grad_output)
    as the steps left them."""
    function = getattr(kata, symbol)
    ctx = Ctx((True,) * len(tensors) + (False,) * len(others))
    args = (*tensors, *others)
    if function.setup_context is not torch.autograd.Function.setup_context:
        output = function.forward(*args)  # the style with setup_context: forward takes no ctx
        function.setup_context(ctx, args, output)
    else:
        output = function.forward(ctx, *args)
    found = {"output": output, "saved": [list(t.shape) for t in ctx.to_save if isinstance(t, torch.Tensor)]}
    if grad_output is not None:
        found["returned"] = function.backward(ctx, grad_output)
    return found | {"inputs": list(tensors), "grad_output": grad_output}


class Steps(torch.autograd.Function):
    """In the judging process: the learner's Function where it lives, as an autograd.Function
    here (each forward and backward a scenario call), for torch.autograd.gradcheck."""

    @staticmethod
    def forward(ctx, implementation, symbol, others, *tensors):
        ctx.implementation, ctx.symbol, ctx.others = implementation, symbol, others
        ctx.save_for_backward(*tensors)
        return steps(implementation, symbol, tensors, others, None)["output"]

    @staticmethod
    def backward(ctx, grad_output):
        got = steps(ctx.implementation, ctx.symbol, ctx.saved_tensors, ctx.others, grad_output)
        returned = got["returned"]
        grads = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
        return (None, None, None, *grads[: len(ctx.saved_tensors)])

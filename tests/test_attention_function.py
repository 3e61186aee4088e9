"""attention_function: a torch.autograd.Function whose backward is written by hand.

Judged like attention_backward (whose inputs and judges it reuses): the output and the
gradients that autograd gets through the Function are compared with autograd through
F.scaled_dot_product_attention in float64; torch.autograd.gradcheck compares the backward
with finite differences; saved-tensor hooks show whether forward kept its tensors with
ctx.save_for_backward. The Function's forward and backward run under the same AUTOGRAD
rules as attention_backward: autograd inside them, in any form, is forbidden.
"""

import re

import torch
import torch.nn.functional as F
from test_attention_backward import FULL, GRAD_TOLERANCES, NAMES, judge_gradients, make_inputs, sizes
from torch.autograd.gradcheck import GradcheckError

from judge.forbidden import AUTOGRAD
from judge.remote.client import observe
from judge.testing.attention import case_table, relative_scale
from judge.testing.checks import (
    assert_close,
    assert_not_modified,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.spec import KataSpec, dtypes
from judge.testing.tolerances import SINGLE_OP as TOLERANCES


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, 8 heads, length 128, head size 64, causal:
    forward and backward through the Function, against the same through
    F.scaled_dot_product_attention. Both turn grad on: the grader times under no_grad."""
    gen = torch.Generator().manual_seed(0)
    query, key, value, grad_output = (randn(gen, 8, 8, 128, 64, device=device) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]

    def run(attention):
        def call():
            with torch.enable_grad():
                return torch.autograd.grad(attention(*leaves), leaves, grad_output)

        return call

    return (
        run(lambda q, k, v: kata.AttentionFunction.apply(q, k, v, True, None)),
        run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    )


SPEC = KataSpec(
    kata="attention_function",
    symbol="AttentionFunction",
    reference="autograd through F.scaled_dot_product_attention in float64, and torch.autograd.gradcheck",
    forbidden=AUTOGRAD,
    tolerances=GRAD_TOLERANCES,
    tolerance_note="float32 atol 5x PyTorch's: a backward sums terms that cancel; four correct styles measured at most 9.5e-6 off",
    cases=case_table(largest=11),
    benchmark=benchmark,
)


def settings(rng, case: dict, index: int) -> tuple[bool, float | None]:
    """(is_causal, scale) for the index-th case: causal for cases 1 and 3, else by chance;
    a custom scale for cases 2 and 3, else by chance."""
    is_causal = index in (1, 3) or rng.random() < 0.3
    scale = relative_scale(rng, case["E"]) if index in (2, 3) or rng.random() < 0.3 else None
    return is_causal, scale


def leaves_of(query, key, value):
    return [t.detach().clone().requires_grad_() for t in (query, key, value)]


def apply_repr(*args) -> str:
    return call_repr("AttentionFunction.apply", *args)


def forward_and_backward(kata, query, key, value, grad_output, is_causal, scale):
    """The Function's output and the gradients autograd gets through it."""
    leaves = leaves_of(query, key, value)
    call = apply_repr(*leaves, is_causal, scale)
    with torch.enable_grad():
        output = kata.AttentionFunction.apply(*leaves, is_causal, scale)
    if not isinstance(output, torch.Tensor):
        raise AssertionError(f"{call} returned {type(output).__name__}, expected a tensor")  # noqa: TRY004
    if output.grad_fn is None:
        raise AssertionError(f"{call} returned an output with no grad_fn: autograd cannot reach your backward")
    grads = torch.autograd.grad(output, leaves, grad_output, allow_unused=True)
    return call, output, dict(zip(NAMES, grads))


def reference_output(query, key, value, is_causal, scale):
    return F.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), is_causal=is_causal, scale=scale
    )


def replay(inputs, is_causal, scale):
    """The same calls with another implementation, on copies of the inputs taken now (for the
    diagnosis)."""
    originals = [t.clone() for t in inputs]

    def run(implementation) -> dict:
        _, output, got = forward_and_backward(implementation, *(t.clone() for t in originals), is_causal, scale)
        return {"an output": output, **got}

    return run


def check_function(kata, inputs, is_causal, scale) -> None:
    query, key, value, _ = inputs
    with SPEC.diagnosing(replay(inputs, is_causal, scale), sizes(inputs)):
        call, output, got = forward_and_backward(kata, *inputs, is_causal, scale)
        want = reference_output(query, key, value, is_causal, scale).to(query.dtype)
        assert_close(output, want, call=call, what="an output", tolerance=TOLERANCES[query.dtype])
        for name in NAMES:
            if got[name] is None:
                raise AssertionError(f"autograd got no {name} through {call}: backward returned None for it")
        kwargs = {"is_causal": is_causal} | ({} if scale is None else {"scale": scale})
        judge_gradients(f"the backward of {call}", got, inputs, **kwargs)


@dtypes(*FULL)
def test_output_and_gradients_match_pytorch_attention(kata, rng, gen, dtype, device):
    for index, case in enumerate(SPEC.cases.cases(rng)):
        with case.judged():
            check_function(kata, make_inputs(gen, case, dtype, device), *settings(rng, case, index))


def saved_shapes(function, *args) -> list:
    """The shapes of what function.apply(*args) saves for backward (run where the kata runs:
    saved tensors never leave the process that made them)."""
    saved = []

    def pack(tensor):
        saved.append(list(tensor.shape))
        return tensor

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function.apply(*args)
    return saved


def test_forward_saves_tensors_for_backward(kata, rng, gen):
    """Tensors kept for backward go through ctx.save_for_backward, which saved-tensor hooks see."""
    case = SPEC.cases.random(rng)[0]
    query, key, value, _ = make_inputs(gen, case, torch.float64, "cpu")

    def check(implementation) -> dict:
        leaves = leaves_of(query, key, value)
        saved = observe(implementation, saved_shapes, implementation.AttentionFunction, *leaves, True, None)
        if not saved:
            raise AssertionError(
                f"{apply_repr(*leaves, True, None)}: forward saved no tensor with ctx.save_for_backward. Keep "
                "what backward needs with it (not as ctx attributes): autograd then checks that those tensors "
                "were not modified in place before backward, and frees them with the graph"
            )
        return {}

    with SPEC.diagnosing(check):
        check(kata)


def test_backward_called_directly_returns_one_gradient_per_input(kata, rng, gen):
    """The backward, called through the output's grad_fn, with grad mode off as autograd's
    engine calls it."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float64, "cpu")

    def check(implementation) -> dict:
        leaves = leaves_of(*inputs[:3])
        call = apply_repr(*leaves, True, None)
        with torch.enable_grad():
            output = implementation.AttentionFunction.apply(*leaves, True, None)
        with torch.no_grad():
            grads = output.grad_fn.apply(inputs[3].clone())
        if not isinstance(grads, (tuple, list)) or len(grads) != 5:
            shown = f"({', '.join(map(describe, grads))})" if isinstance(grads, (tuple, list)) else describe(grads)
            raise AssertionError(
                f"the backward of {call} returned {shown}; expected 5 values, one per forward "
                "input: (grad_query, grad_key, grad_value, None, None)"
            )
        got = dict(zip(NAMES, grads))
        judge_gradients(f"the backward of {call}", got, inputs, is_causal=True)
        return got

    with SPEC.diagnosing(check, sizes(inputs)):
        check(kata)


def test_gradcheck_passes_in_float64(kata, rng, gen):
    """Finite differences against the backward, on small float64 inputs (the random draws:
    the edge cases run in the other tests). Fast mode compares random projections of the
    Jacobians instead of every entry: each forward runs under the guard, and the gradients
    themselves are compared with autograd's, entry by entry, in the other tests."""
    for index, case in enumerate(SPEC.cases.random(rng)):
        with case.judged():
            # small enough for finite differences: at most 3 x 4 x 5 x 4 x 3 (B, L, S, E, Ev)
            case = case | {"lead": [min(b, 3) for b in case["lead"][:1]]}
            case |= {name: min(case[name], limit) for name, limit in (("L", 4), ("S", 5), ("E", 4), ("Ev", 3))}
            query, key, value, _ = make_inputs(gen, case, torch.float64, "cpu")
            is_causal, scale = settings(rng, case, index)
            leaves = leaves_of(query, key, value)
            call = apply_repr(*leaves, is_causal, scale)

            def function(q, k, v, is_causal=is_causal, scale=scale):
                return kata.AttentionFunction.apply(q, k, v, is_causal, scale)

            try:
                with SPEC.diagnosing(lambda implementation: gradcheck_of(implementation, leaves, is_causal, scale)):
                    torch.autograd.gradcheck(function, leaves, fast_mode=True)
            except GradcheckError as error:
                first = str(error).strip().splitlines()[0].rstrip(",")
                which = re.search(r"with respect to input (\d)", first)
                if which:
                    first += f" ({NAMES[int(which.group(1))]} is off)"
                failure = AssertionError(f"torch.autograd.gradcheck failed for {call}: {first}")
                failure.kata_diagnosis = getattr(error, "kata_diagnosis", [])
                raise failure from None


def gradcheck_of(implementation, leaves, is_causal, scale) -> dict:
    """gradcheck of another implementation on the same inputs (for the diagnosis: it fails
    with the same message, or passes)."""
    leaves = [leaf.detach().clone().requires_grad_() for leaf in leaves]
    torch.autograd.gradcheck(
        lambda q, k, v: implementation.AttentionFunction.apply(q, k, v, is_causal, scale), leaves, fast_mode=True
    )
    return {}


def test_results_follow_the_dtype_and_device_of_the_inputs(kata, rng, gen, other_device):
    case = SPEC.cases.random(rng)[0]
    for dtype in FULL:
        inputs = make_inputs(gen, case, dtype, other_device)
        if other_device != "meta":
            check_function(kata, inputs, True, None)
            continue
        with SPEC.diagnosing(replay(inputs, True, None), sizes(inputs)):
            call, output, got = call_on_device(
                lambda inputs=inputs: forward_and_backward(kata, *inputs, True, None), other_device
            )  # meta tensors have a shape and a device but no values
            check_tensor_kind(output, torch.empty_like(inputs[3]), call=call, what="an output")
            for name, like in zip(NAMES, inputs):
                check_tensor_kind(got[name], torch.empty_like(like), call=f"the backward of {call}", what=name)


def test_does_not_modify_its_inputs(kata, rng, gen):
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, "cpu")
    for is_causal, scale in ((False, None), (True, relative_scale(rng, case["E"]))):
        leaves = leaves_of(*inputs[:3])
        grad_output = inputs[3].clone()
        with torch.enable_grad():
            output = kata.AttentionFunction.apply(*leaves, is_causal, scale)
        torch.autograd.grad(output, leaves, grad_output, allow_unused=True)
        call = apply_repr(*leaves, is_causal, scale) + " and its backward"
        for name, tensor, original in zip(("query", "key", "value", "grad_output"), [*leaves, grad_output], inputs):
            assert_not_modified(name, tensor.detach(), original, call=call)

"""attention_backward: hand-written gradients judged against autograd.

The judge is autograd through F.scaled_dot_product_attention, run in float64 on the
inputs' device, whatever the kata's dtype: float32 gradients are compared with the exact
ones at float32 tolerances, so a correct kata is never failed for PyTorch's own float32
rounding (or a fused kernel's). A second judge, autograd through the attention formula
written out eagerly, checks the same gradients without SDPA's kernels.

Inputs are unit normals, and the default or custom scale keeps the scores' spread between
0.4 and 2.2, so the softmax is not saturated: a wrong scale or a missing softmax term shows.
Autograd inside the kata, in any form, is refused by the spec's AUTOGRAD rules (the same
for every backward kata): its engine's entry points, autograd's own *_backward kernels,
forward-mode AD, and any operation that records a graph while the kata runs.
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import AUTOGRAD
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

FULL = [torch.float32, torch.float64]
NAMES = ("grad_query", "grad_key", "grad_value")

# float64 uses the shared tolerances. For float32 the atol is 5x the shared one: a backward
# pass sums terms that cancel (grad_weights - rowsum(grad_weights * weights)), so a correct
# kata's error follows the size of those terms, not of each result. Measured over 8400
# float32 gradients from four correct styles (the FlashAttention D trick the worst): at most
# 9.5e-6 off, for gradients up to 11. Wrong formulas are off by more than 1e-2.
GRAD_TOLERANCES = {torch.float64: TOLERANCES[torch.float64], torch.float32: {"rtol": 1.3e-6, "atol": 5e-5}}


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, 8 heads, length 128, head size 64, causal.

    The reference is what autograd does for the same job: run the forward through
    F.scaled_dot_product_attention recording the graph, then backward. The kata recomputes
    its forward too. The grader times under torch.no_grad(), so the reference turns grad on.
    """
    gen = torch.Generator().manual_seed(0)
    query, key, value, grad_output = (randn(gen, 8, 8, 128, 64, device=device) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]

    def reference():
        with torch.enable_grad():
            output = F.scaled_dot_product_attention(*leaves, is_causal=True)
            return torch.autograd.grad(output, leaves, grad_output)

    return (lambda: kata.attention_backward(query, key, value, grad_output, is_causal=True)), reference


SPEC = KataSpec(
    kata="attention_backward",
    symbol="attention_backward",
    reference="autograd through F.scaled_dot_product_attention in float64 (and through the eager formula)",
    forbidden=AUTOGRAD,
    tolerances=GRAD_TOLERANCES,
    tolerance_note="float32 atol 5x PyTorch's: a backward sums terms that cancel; four correct styles measured at most 9.5e-6 off",
    cases=case_table(largest=11),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- inputs


def make_inputs(gen, case: dict, dtype, device) -> tuple[torch.Tensor, ...]:
    """query, key, value, grad_output: unit normals, the same numbers for every dtype."""
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    grad_output = randn(gen, *lead, case["L"], case["Ev"], dtype=dtype, device=device)
    return query, key, value, grad_output


# --------------------------------------------------------------------------- references


def _leaves(query, key, value):
    return [t.detach().double().requires_grad_() for t in (query, key, value)]


def sdpa_gradients(query, key, value, grad_output, *, is_causal=False, scale=None):
    """Autograd through F.scaled_dot_product_attention, in float64 on the inputs' device."""
    leaves = _leaves(query, key, value)
    with torch.enable_grad():
        output = F.scaled_dot_product_attention(*leaves, is_causal=is_causal, scale=scale)
    return torch.autograd.grad(output, leaves, grad_output.double())


def eager_gradients(query, key, value, grad_output, *, is_causal=False, scale=None):
    """Autograd through softmax(q k^T * scale + causal bias) v written out, in float64."""
    q, k, v = leaves = _leaves(query, key, value)
    L, S, E = q.size(-2), k.size(-2), q.size(-1)
    with torch.enable_grad():
        scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(E) if scale is None else scale)
        if is_causal:  # -inf strictly above the main diagonal: key j > query i is blocked
            scores = scores + torch.full((L, S), -math.inf, dtype=q.dtype, device=q.device).triu(1)
        output = torch.softmax(scores, dim=-1) @ v
    return torch.autograd.grad(output, leaves, grad_output.double())


# --------------------------------------------------------------------------- checks


def call_kata(kata, query, key, value, grad_output, **kwargs):
    call = call_repr("attention_backward", query, key, value, grad_output, **kwargs)
    result = kata.attention_backward(query, key, value, grad_output, **kwargs)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise AssertionError(
            f"{call} returned {describe(result)}; expected a triple (grad_query, grad_key, grad_value)"
        )
    return call, dict(zip(NAMES, result))


HINTS = {
    "grad_value": "grad_value needs only the weights and grad_output: check the recomputed weights "
    "(scale, causal mask) and the transpose.",
    "grad_query": "grad_value is right, so the weights are: check the softmax backward and the scale.",
    "grad_key": "grad_query is right, so grad_scores is: check the transpose and the scale in grad_key.",
}


def judge_gradients(call: str, got: dict, inputs, judge=sdpa_gradients, **kwargs) -> None:
    """Judge grad_value, grad_query, grad_key in that order (each depends on more of the
    derivation than the one before), with a hint for the first one that is off."""
    dtype = inputs[0].dtype
    want = dict(zip(NAMES, (g.to(dtype) for g in judge(*inputs, **kwargs))))
    for name in NAMES:
        check_tensor_kind(got[name], want[name], call=call, what=name)
    for name in ("grad_value", "grad_query", "grad_key"):
        try:
            assert_close(got[name], want[name], call=call, what=name, tolerance=GRAD_TOLERANCES[dtype])
        except AssertionError as error:
            error.args = (f"{error}. {HINTS[name]}",)  # in place: it stays a Mismatch for the diagnosis
            raise


def replay(inputs, **kwargs):
    """The same call with another implementation, on copies of the inputs taken now (for the
    diagnosis)."""
    originals = [t.clone() for t in inputs]
    return lambda implementation: call_kata(implementation, *(t.clone() for t in originals), **kwargs)[1]


def sizes(inputs) -> dict:
    query, key, value, _ = inputs
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1)}


def check_gradients(kata, inputs, judge=sdpa_gradients, **kwargs) -> None:
    """The learner's gradients against the judge's, computed on the inputs as they were (a
    kata that modifies them in place is judged on what it was given)."""
    originals = [t.clone() for t in inputs]
    with SPEC.diagnosing(replay(inputs, **kwargs), sizes(inputs)):
        call, got = call_kata(kata, *inputs, **kwargs)
        judge_gradients(call, got, originals, judge, **kwargs)


# --------------------------------------------------------------------------- correctness


@dtypes(*FULL)
def test_gradients_match_autograd_through_pytorch_attention(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_gradients(kata, make_inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_gradients(kata, make_inputs(gen, case, dtype, device), is_causal=True)


@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    for index, case in enumerate(SPEC.cases.cases(rng)):
        with case.judged():
            inputs = make_inputs(gen, case, dtype, device)
            check_gradients(kata, inputs, scale=relative_scale(rng, case["E"]), is_causal=index % 2 == 1)


@dtypes(*FULL)
def test_gradients_match_an_eager_autograd_reference(kata, rng, gen, dtype, device):
    for index, case in enumerate(SPEC.cases.cases(rng)):
        with case.judged():
            kwargs = {"is_causal": index in (0, 1) or rng.random() < 0.5}
            if rng.random() < 0.5:
                kwargs["scale"] = relative_scale(rng, case["E"])
            check_gradients(kata, make_inputs(gen, case, dtype, device), judge=eager_gradients, **kwargs)


# --------------------------------------------------------------------------- contract


def test_works_under_no_grad_on_inputs_that_do_not_require_grad(kata, rng, gen):
    """As the grader times it: the gradients come from the learner's own formulas (autograd,
    in any form, is refused by the spec's AUTOGRAD rules in every test)."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float64, "cpu")
    kwargs = {"is_causal": True, "scale": relative_scale(rng, case["E"])}
    originals = [t.clone() for t in inputs]
    with SPEC.diagnosing(replay(inputs, **kwargs), sizes(inputs)):
        with torch.no_grad():
            call, got = call_kata(kata, *inputs, **kwargs)
        judge_gradients(call + " under torch.no_grad()", got, originals, **kwargs)


def test_results_follow_the_dtype_and_device_of_the_inputs(kata, rng, gen, other_device):
    """Each gradient has the shape of its input, on the inputs' device, in their dtype."""
    case = SPEC.cases.random(rng)[0]
    for dtype in FULL:
        inputs = make_inputs(gen, case, dtype, other_device)
        if other_device != "meta":
            check_gradients(kata, inputs, is_causal=True)
            continue
        with SPEC.diagnosing(replay(inputs, is_causal=True), sizes(inputs)):
            call, got = call_on_device(lambda inputs=inputs: call_kata(kata, *inputs, is_causal=True), other_device)
            for name, like in zip(NAMES, inputs):  # meta tensors have a shape and a device but no values
                check_tensor_kind(got[name], torch.empty_like(like), call=call, what=name)


def test_does_not_modify_its_inputs(kata, rng, gen):
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, "cpu")
    for kwargs in ({}, {"is_causal": True, "scale": relative_scale(rng, case["E"])}):

        def check(implementation, kwargs=kwargs) -> dict:
            tensors = [tensor.clone() for tensor in inputs]
            call, got = call_kata(implementation, *tensors, **kwargs)
            for name, tensor, original in zip(("query", "key", "value", "grad_output"), tensors, inputs):
                assert_not_modified(name, tensor, original, call=call)
            return got

        with SPEC.diagnosing(check, sizes(inputs)):
            check(kata)

"""attention_backward: hand-written gradients judged against autograd.

The judge is autograd through F.scaled_dot_product_attention, run in float64 on the
inputs' device, whatever the kata's dtype: float32 gradients are compared with the exact
ones at float32 tolerances, so a correct kata is never failed for PyTorch's own float32
rounding (or a fused kernel's). A second judge, autograd through the attention formula
written out eagerly, checks the same gradients without SDPA's kernels.

Inputs are unit normals, and the default or custom scale keeps the scores' spread between
0.4 and 2.2, so the softmax is not saturated: a wrong scale or a missing softmax term shows.
Any use of autograd inside the kata is reported by a TorchFunctionMode that sees every
entry into autograd's engine (see AutogradSpy).
"""

import math
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from judge.forbidden import AUTOGRAD
from judge.testing.checks import (
    assert_close,
    assert_not_modified,
    assert_prints_nothing,
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


# --------------------------------------------------------------------------- inputs


def hidden_cases(rng, count: int = 4) -> list[dict]:
    """Shapes in which every size differs: leading dims (), (B,) or (B, H), then L, S, E, Ev.

    The first case has L < S and the second L > S; one size (L, S, E or Ev) of a later
    case is 1.
    """
    cases = []
    for index, n_lead in enumerate(rng.sample([0, 1, 2, 2], count)):
        sizes = rng.sample(range(2, 12), 4 + n_lead)
        lead, (L, S, E, Ev) = sizes[:n_lead], sizes[n_lead:]
        if index < 2 and (L < S) != (index == 0):
            L, S = S, L
        cases.append({"lead": lead, "L": L, "S": S, "E": E, "Ev": Ev})
    rng.choice(cases[2:])[rng.choice(["L", "S", "E", "Ev"])] = 1
    return cases


def make_inputs(gen, case: dict, dtype, device) -> tuple[torch.Tensor, ...]:
    """query, key, value, grad_output: unit normals, the same numbers for every dtype."""
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    grad_output = randn(gen, *lead, case["L"], case["Ev"], dtype=dtype, device=device)
    return query, key, value, grad_output


def custom_scale(rng, case: dict) -> float:
    """A scale 0.4x to 2.2x the default 1/sqrt(E), never near it: scores keep a spread of 0.4 to 2.2."""
    return round(rng.choice([0.4, 0.6, 1.6, 2.2]) / math.sqrt(case["E"]), 4)


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


def factor_hint(got: torch.Tensor, want: torch.Tensor, scale: float) -> str:
    """' It is the expected result times 2.83 (the scale is 0.354).' when that is what happened."""
    got, want = got.detach().cpu().double().flatten(), want.detach().cpu().double().flatten()
    norm = want.dot(want)
    if norm == 0 or not torch.isfinite(got).all():
        return ""
    factor = (got.dot(want) / norm).item()
    if abs(factor - 1) < 1e-3 or (got - factor * want).norm() > 1e-4 * norm.sqrt():
        return ""
    return f" It is the expected result times {factor:.4g} (the scale is {scale:.4g})."


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
    scale = kwargs.get("scale") or 1 / math.sqrt(inputs[0].size(-1))
    for name in ("grad_value", "grad_query", "grad_key"):
        try:
            assert_close(got[name], want[name], call=call, what=name, tolerance=GRAD_TOLERANCES[dtype])
        except AssertionError as error:
            raise AssertionError(f"{error}.{factor_hint(got[name], want[name], scale)} {HINTS[name]}") from None


def check_gradients(kata, inputs, judge=sdpa_gradients, **kwargs) -> None:
    call, got = call_kata(kata, *inputs, **kwargs)
    judge_gradients(call, got, inputs, judge, **kwargs)


# --------------------------------------------------------------------------- autograd detection

# What a TorchFunctionMode sees when code enters autograd's engine: reverse mode
# (torch.func.grad/vjp/jacrev and torch.autograd.functional reach torch.autograd.grad, and
# make their inputs require grad first), and forward mode (torch.func.jvp/jacfwd and
# torch.autograd.forward_ad make dual tensors).
ENGINE_CALLS = {
    "grad": "torch.autograd.grad",
    "Tensor.backward": ".backward()",
    "backward": "torch.autograd.backward",
    "_make_dual": "forward-mode AD (make_dual)",
}
AUTOGRAD_DOORS = {
    "torch/_functorch/": "torch.func",
    "torch/autograd/functional.py": "torch.autograd.functional",
    "torch/autograd/forward_ad.py": "torch.autograd.forward_ad",
}


class AutogradSpy(TorchFunctionMode):
    """Sees every torch call made inside it and refuses the ones that run autograd.

    A call into the engine raises AssertionError at once, naming the kata line that made
    it. requires_grad_() (asking autograd to record a graph) is only noted, so that the
    engine call that follows is the one named; `seen` keeps both, in case the kata
    swallows the exception or reaches the engine by a path the mode does not see.
    """

    def __init__(self, kata_file: str):
        super().__init__()
        self.kata_file = str(Path(kata_file).resolve())
        self.engine: list[str] = []
        self.recording: list[str] = []

    @property
    def seen(self) -> list[str]:
        return self.engine + self.recording

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, qualname = getattr(func, "__name__", ""), getattr(func, "__qualname__", "")
        if name in ENGINE_CALLS:
            self.engine.append(self.describe(ENGINE_CALLS.get(qualname, ENGINE_CALLS[name])))
            raise AssertionError(self.engine[-1])
        if name == "requires_grad_" and (args[1:] or [kwargs.get("requires_grad", True)])[0]:
            self.recording.append(self.describe("requires_grad_() to have autograd record the forward"))
        return func(*args, **kwargs)

    def describe(self, what: str) -> str:
        stack = traceback.extract_stack()
        lines = [f.lineno for f in stack if str(Path(f.filename).resolve()) == self.kata_file]
        doors = [door for f in stack for part, door in AUTOGRAD_DOORS.items() if part in Path(f.filename).as_posix()]
        return (
            f"{what}"
            + (f" through {doors[0]}" if doors else "")
            + (f" (at {Path(self.kata_file).name}, line {lines[-1]})" if lines else "")
        )


# --------------------------------------------------------------------------- correctness


@dtypes(*FULL)
def test_gradients_match_autograd_through_pytorch_attention(kata, rng, gen, dtype, device):
    for case in hidden_cases(rng):
        check_gradients(kata, make_inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in hidden_cases(rng):
        check_gradients(kata, make_inputs(gen, case, dtype, device), is_causal=True)


@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    for index, case in enumerate(hidden_cases(rng)):
        inputs = make_inputs(gen, case, dtype, device)
        check_gradients(kata, inputs, scale=custom_scale(rng, case), is_causal=index % 2 == 1)


@dtypes(*FULL)
def test_gradients_match_an_eager_autograd_reference(kata, rng, gen, dtype, device):
    for index, case in enumerate(hidden_cases(rng)):
        kwargs = {"is_causal": index in (0, 1) or rng.random() < 0.5}
        if rng.random() < 0.5:
            kwargs["scale"] = custom_scale(rng, case)
        check_gradients(kata, make_inputs(gen, case, dtype, device), judge=eager_gradients, **kwargs)


# --------------------------------------------------------------------------- contract


def test_does_not_use_autograd(kata, rng, gen):
    """Inputs that do not require grad, under torch.no_grad() (as the grader times katas):
    the gradients must come from the learner's own formulas, not from autograd."""
    case = hidden_cases(rng)[1]
    inputs = make_inputs(gen, case, torch.float64, "cpu")
    kwargs = {"is_causal": True, "scale": custom_scale(rng, case)}
    call = call_repr("attention_backward", *inputs, **kwargs)
    spy = AutogradSpy(kata.__file__)
    try:
        with torch.no_grad(), spy:
            _, got = call_kata(kata, *inputs, **kwargs)
    finally:
        if spy.seen:  # also when the kata caught the AssertionError and carried on
            raise AssertionError(
                f"{call} used autograd: it called {spy.seen[0]}. Derive the gradients and compute "
                "them with ordinary tensor operations: no autograd, torch.func or .backward()"
            ) from None
    judge_gradients(call + " under torch.no_grad()", got, inputs, **kwargs)


def test_results_follow_the_dtype_and_device_of_the_inputs(kata, rng, gen, other_device):
    """Each gradient has the shape of its input, on the inputs' device, in their dtype."""
    case = hidden_cases(rng)[0]
    for dtype in FULL:
        inputs = make_inputs(gen, case, dtype, other_device)
        if other_device != "meta":
            check_gradients(kata, inputs, is_causal=True)
            continue
        call = call_repr("attention_backward", *inputs, is_causal=True)
        result = call_on_device(lambda inputs=inputs: call_kata(kata, *inputs, is_causal=True), other_device)
        if result is not None:  # meta tensors have a shape and a device but no values
            for name, like in zip(NAMES, inputs):
                check_tensor_kind(result[1][name], torch.empty_like(like), call=call, what=name)


def test_does_not_modify_its_inputs(kata, rng, gen):
    case = hidden_cases(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, "cpu")
    for kwargs in ({}, {"is_causal": True, "scale": custom_scale(rng, case)}):
        snapshots = [tensor.clone() for tensor in inputs]
        call, _ = call_kata(kata, *inputs, **kwargs)
        for name, tensor, snapshot in zip(("query", "key", "value", "grad_output"), inputs, snapshots):
            assert_not_modified(name, tensor, snapshot, call=call)


def test_prints_nothing(kata, gen, capfd):
    query, key, value, grad_output = randn(gen, 2, 3), randn(gen, 4, 3), randn(gen, 4, 5), randn(gen, 2, 5)
    kata.attention_backward(query, key, value, grad_output, is_causal=True)
    assert_prints_nothing(capfd, "attention_backward(...)")


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
    reference="autograd through F.scaled_dot_product_attention in float64",
    forbidden=AUTOGRAD,
    benchmark=benchmark,
)

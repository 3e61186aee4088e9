"""attention_function: a torch.autograd.Function whose backward is written by hand.

Judged like attention_backward (whose inputs and judges it shares, judge.testing.attention):
the Function's output and the gradients its backward returns are compared with autograd
through F.scaled_dot_product_attention in float64; torch.autograd.gradcheck compares the
backward with finite differences of the forward; the stand-in ctx shows whether forward kept
its tensors with ctx.save_for_backward. The kata forbids autograd as attention_backward does,
so the kata process has none: the judge calls the Function's forward and backward itself, as
autograd's engine would, with a stand-in for its ctx (judge.testing.function_steps), and
gradcheck runs here through those calls.
"""

import re

import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError

from judge.forbidden import AUTOGRAD
from judge.language import pick
from judge.testing.attention import (
    GRAD_TOLERANCES,
    GRADIENTS,
    backward_inputs,
    backward_sizes,
    case_table,
    judge_gradients,
    relative_scale,
    sdpa_gradients,
)
from judge.testing.checks import assert_close, call_repr, describe, judge_on_device
from judge.testing.function_steps import Ctx, Steps, steps
from judge.testing.functions import assert_inputs_unchanged
from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE, KataSpec, core_dtype, dtypes
from judge.testing.tiers import convention, core
from judge.testing.tolerances import SINGLE_OP

FULL = [torch.float32, torch.float64]
make_inputs = backward_inputs


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, 8 heads, length 128, head size 64, causal:
    the Function's forward and backward, called as autograd's engine calls them, against
    autograd's forward and backward through F.scaled_dot_product_attention."""
    gen = torch.Generator().manual_seed(0)
    query, key, value, grad_output = (randn(gen, 8, 8, 128, 64, device=device) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (query, key, value)]

    def kata_call():
        ctx = Ctx((True, True, True, False, False))
        kata.AttentionFunction.forward(ctx, query, key, value, True, None)
        return kata.AttentionFunction.backward(ctx, grad_output)

    def reference_call():
        with torch.enable_grad():
            output = F.scaled_dot_product_attention(*leaves, is_causal=True)
            return torch.autograd.grad(output, leaves, grad_output)

    return kata_call, reference_call


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


def apply_repr(*args) -> str:
    return call_repr("AttentionFunction.apply", *args)


def reference_output(query, key, value, is_causal, scale):
    """F.scaled_dot_product_attention in float64, rounded to the inputs' dtype."""
    output = F.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), is_causal=is_causal, scale=scale
    )
    return output.to(query.dtype)


# --------------------------------------------------------------------------- the judging process's side


def outcome(implementation, inputs, is_causal, scale) -> dict:
    """{"an output", grad_query, grad_key, grad_value, "returned", "saved", "inputs"}: the
    Function's forward and backward where `implementation` lives (also a slip's, for the
    diagnosis), through judge.testing.function_steps.steps."""
    query, key, value, grad_output = inputs
    text = apply_repr(query, key, value, is_causal, scale)
    got = steps(implementation, "AttentionFunction", (query, key, value), (is_causal, scale), grad_output)
    if not isinstance(got["output"], torch.Tensor):
        raise AssertionError(
            pick(
                f"{text} returned {describe(got['output'])}, expected a tensor",
                f"{text} 返回了 {describe(got['output'])}，应返回一个张量",
            )
        )
    returned = got["returned"]
    if not isinstance(returned, (tuple, list)) or len(returned) != 5:
        shown = f"({', '.join(map(describe, returned))})" if isinstance(returned, (tuple, list)) else describe(returned)
        raise AssertionError(
            pick(
                f"the backward of {text} returned {shown}; expected 5 values, one per forward "
                "input: (grad_query, grad_key, grad_value, None, None)",
                f"{text} 的 backward 返回了 {shown}；应返回 5 个值，forward 的每个输入各一个："
                "(grad_query, grad_key, grad_value, None, None)",
            )
        )
    return {"an output": got["output"], **dict(zip(GRADIENTS, returned))} | {
        "returned": returned,
        "saved": got["saved"],
        "inputs": [*got["inputs"], got["grad_output"]],
    }


def check_function(kata, inputs, is_causal, scale, *, float64_throughout=False) -> None:
    query, key, value, grad_output = inputs
    text = apply_repr(query, key, value, is_causal, scale)
    want_output = reference_output(query, key, value, is_causal, scale)
    want = sdpa_gradients(*inputs, is_causal=is_causal, scale=scale)

    def replay(implementation) -> dict:
        return outcome(implementation, inputs, is_causal, scale)

    with SPEC.diagnosing(replay, backward_sizes(inputs)):
        got = replay(kata)
        tolerance = SINGLE_OP[core_dtype(query.dtype, float64_throughout)]
        assert_close(got["an output"], want_output, call=text, what="an output", tolerance=tolerance)
        for name in GRADIENTS:
            if got[name] is None:
                raise AssertionError(
                    pick(
                        f"the backward of {text} returned None for {name}",
                        f"{text} 的 backward 对 {name} 返回了 None",
                    )
                )
        backward = pick(f"the backward of {text}", f"{text} 的 backward")
        judge_gradients(backward, got, want, float64_throughout=float64_throughout)


# --------------------------------------------------------------------------- core


@core(zh="输出和梯度与 PyTorch 注意力一致")
@dtypes(*FULL)
def test_output_and_gradients_match_pytorch_attention(kata, rng, gen, dtype, device):
    for index, case in enumerate(SPEC.cases.cases(rng)):
        with case.judged():
            check_function(kata, make_inputs(gen, case, dtype, device), *settings(rng, case, index))


@core(zh="直接调用 backward 时每个输入返回一个梯度")
def test_backward_called_directly_returns_one_gradient_per_input(kata, rng, gen):
    """The backward, called as autograd's engine calls it: one value per input of forward,
    None for is_causal and scale."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float64, "cpu")
    text = apply_repr(*inputs[:3], True, None)

    def replay(implementation) -> dict:
        return outcome(implementation, inputs, True, None)

    with SPEC.diagnosing(replay, backward_sizes(inputs)):
        got = replay(kata)
        if any(extra is not None for extra in got["returned"][3:]):
            shown = ", ".join(map(describe, got["returned"][3:]))
            raise AssertionError(
                pick(
                    f"the backward of {text} returned ({shown}) for is_causal and scale; expected None, None",
                    f"{text} 的 backward 对 is_causal 和 scale 返回了 ({shown})；应为 None, None",
                )
            )
        backward = pick(f"the backward of {text}", f"{text} 的 backward")
        judge_gradients(backward, got, sdpa_gradients(*inputs, is_causal=True))


@core(zh="在 float64 下通过 gradcheck")
def test_gradcheck_passes_in_float64(kata, rng, gen):
    """Finite differences of the forward against the backward, on small float64 inputs (the
    random draws: the edge cases run in the other tests), gradcheck running here and each of
    its forwards and backwards a call where the kata lives. Fast mode compares random
    projections of the Jacobians instead of every entry: the gradients themselves are compared
    with autograd's, entry by entry, in the other tests."""
    for index, case in enumerate(SPEC.cases.random(rng)):
        with case.judged():
            # small enough for finite differences: at most 3 x 4 x 5 x 4 x 3 (B, L, S, E, Ev)
            case = case | {"lead": [min(b, 3) for b in case["lead"][:1]]}
            case |= {name: min(case[name], limit) for name, limit in (("L", 4), ("S", 5), ("E", 4), ("Ev", 3))}
            query, key, value, _ = make_inputs(gen, case, torch.float64, "cpu")
            is_causal, scale = settings(rng, case, index)
            text = apply_repr(query, key, value, is_causal, scale)

            def check(implementation, is_causal=is_causal, scale=scale, text=text) -> dict:
                def function(*tensors):
                    return Steps.apply(implementation, "AttentionFunction", (is_causal, scale), *tensors)

                leaves = [t.detach().clone().requires_grad_() for t in (query, key, value)]
                try:
                    torch.autograd.gradcheck(function, leaves, fast_mode=True)
                except GradcheckError as error:
                    first = str(error).strip().splitlines()[0].rstrip(",")
                    which = re.search(r"with respect to input (\d)", first)
                    if which:
                        off = GRADIENTS[int(which.group(1))]
                        first += pick(f" ({off} is off)", f"（{off} 不对）")
                    raise AssertionError(
                        pick(
                            f"torch.autograd.gradcheck failed for {text}: {first}",
                            f"torch.autograd.gradcheck 对 {text} 检查失败：{first}",
                        )
                    ) from None
                return {}

            with SPEC.diagnosing(check):
                check(kata)


# --------------------------------------------------------------------------- conventions


@convention(
    "forward keeps the tensors backward needs with ctx.save_for_backward (never as ctx attributes)",
    zh="forward 用 ctx.save_for_backward 保存 backward 需要的张量",
)
def test_forward_saves_tensors_for_backward(kata, rng, gen):
    """Tensors kept for backward go through ctx.save_for_backward, which the stand-in ctx records."""
    case = SPEC.cases.random(rng)[0]
    query, key, value, grad_output = make_inputs(gen, case, torch.float64, "cpu")

    def check(implementation) -> dict:
        got = outcome(implementation, (query, key, value, grad_output), True, None)
        if not got["saved"]:
            raise AssertionError(
                pick(
                    f"{apply_repr(query, key, value, True, None)}: forward saved no tensor with ctx.save_for_backward. "
                    "Keep what backward needs with it (not as ctx attributes): autograd then checks that those tensors "
                    "were not modified in place before backward, and frees them with the graph",
                    f"{apply_repr(query, key, value, True, None)}：forward 没有用 ctx.save_for_backward 保存任何张量。"
                    "backward 需要的张量要用它保存（不要存成 ctx 的属性）：这样 autograd 会检查这些张量"
                    "在 backward 之前没有被原地修改，并随计算图一起释放它们",
                )
            )
        return {}

    with SPEC.diagnosing(check):
        check(kata)


@convention("results follow the inputs' device (a causal mask made inside too).", zh="结果的 dtype 和设备与输入一致")
def test_results_follow_the_dtype_and_device_of_the_inputs(kata, other_device):
    """The output and each gradient on the inputs' device, in their dtype, causal."""
    case = SPEC.cases.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for dtype in FULL:

        def make(device, dtype=dtype):
            return make_inputs(torch.Generator().manual_seed(0), case, dtype, device)

        def run(device, check) -> None:
            inputs = make(device)
            text = apply_repr(*inputs[:3], True, None)
            with SPEC.diagnosing(lambda implementation: outcome(implementation, inputs, True, None), case.sizes):
                check(text, outcome(kata, inputs, True, None))

        def expected(device, make=make) -> dict:
            inputs = make(device)
            return {"an output": reference_output(*inputs[:3], True, None)} | sdpa_gradients(*inputs, is_causal=True)

        def compare(got, want, *, call: str, what: str) -> None:
            table = SINGLE_OP if what == "an output" else GRAD_TOLERANCES
            assert_close(got, want, call=call, what=what, tolerance=table[core_dtype(want.dtype, False)])

        judge_on_device(run, other_device, expected=expected, compare=compare)


@convention("the inputs and grad_output are never changed in place.", zh="不修改输入和 grad_output")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """query, key and value after forward and backward, and grad_output after backward, by value."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, "cpu")
    for is_causal, scale in ((False, None), (True, relative_scale(rng, case["E"]))):
        call = apply_repr(*inputs[:3], is_causal, scale)
        text = pick(f"{call} and its backward", f"{call} 及其 backward")

        def check(implementation, is_causal=is_causal, scale=scale, text=text) -> dict:
            got = outcome(implementation, inputs, is_causal, scale)
            names = ("query", "key", "value", "grad_output")
            assert_inputs_unchanged(text, dict(zip(names, inputs)), dict(zip(names, got["inputs"])))
            return got

        with SPEC.diagnosing(check, backward_sizes(inputs)):
            check(kata)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The output and the gradients in float64 held to float64's own tolerances."""
    for index, case in enumerate(SPEC.cases.cases(rng, 2)):
        with case.judged():
            inputs = make_inputs(gen, case, torch.float64, "cpu")
            check_function(kata, inputs, *settings(rng, case, index), float64_throughout=True)

"""layer_norm: the conventions: half precision, the float64 rule, no_grad, devices, inputs
unchanged; the SPEC, references, tolerances and checks are in common.py."""

import torch

from judge.language import pick
from judge.testing.checks import assert_close
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention

from .common import (
    CASES,
    EDGES,
    EXPLICIT_EPS,
    FULL,
    HALF,
    LARGE,
    LN,
    ORDER,
    ORDINARY,
    SMALL,
    SPEC,
    backward_args,
    backward_call,
    backward_reference,
    backward_under_no_grad,
    check_backward,
    check_forward,
    forward_args,
    forward_call,
    forward_reference_of,
    grad_tolerance,
    gradient_scales,
    judge_gradients,
    sizes_of,
    triple,
)

HALF_RULE = "float16 and bfloat16 inputs are computed in float32 and the result cast back to the input's dtype"


@convention(HALF_RULE, zh="半精度在 float32 中计算，再转换回原 dtype")
@dtypes(*HALF)
def test_half_precision_is_computed_in_float32_and_cast_back(kata, rng, gen, dtype):
    """Rows of spread 300 among the others: their squares overflow float16."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            options = {"eps": rng.choice(EXPLICIT_EPS)} if index % 2 else {}
            check_forward(kata, forward_args(gen, case, dtype, "cpu", **options), case)


@convention(HALF_RULE, zh="半精度的反向传播在 float32 中计算，再转换回原 dtype")
@dtypes(*HALF)
def test_backward_in_half_precision_is_computed_in_float32_and_cast_back(kata, rng, gen, dtype):
    """float16 rows of spread 300: their squares overflow float16."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            spread = LARGE if dtype == torch.float16 and index % 2 == 0 else ORDINARY
            check_backward(kata, backward_args(gen, case, dtype, "cpu", spread=spread, weight=index % 3 != 1), case)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The forward and the backward (with and without a weight, rows of ordinary and of
    small variance), held to float64's own tolerances."""
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            eps = rng.choice(EXPLICIT_EPS)
            check_forward(kata, forward_args(gen, case, torch.float64, "cpu", eps=eps), case, float64_throughout=True)
            args = backward_args(gen, case, torch.float64, "cpu", weight=index % 2 == 0)
            check_backward(kata, args, case, float64_throughout=True)
            args = backward_args(gen, case, torch.float64, "cpu", spread=SMALL, weight=index % 2 == 1, eps=eps)
            check_backward(kata, args, case, float64_throughout=True)


@convention(
    "layer_norm_backward works under torch.no_grad(), as the grader times it",
    zh="反向函数在 torch.no_grad() 下、对不需要梯度的输入也能运行",
)
def test_backward_works_under_no_grad_on_inputs_that_do_not_require_grad(kata, rng, gen):
    """The gradients come from the learner's own formulas (autograd, in any form, is refused
    by the AUTOGRAD rules in every test)."""
    case = CASES.random(rng)[1]
    args = backward_args(gen, case, torch.float64, "cpu", eps=rng.choice(EXPLICIT_EPS))
    want, scales = backward_reference(**args), gradient_scales(**args)
    positional, keywords = backward_call(args)
    text = LN.text("layer_norm_backward", positional, keywords) + pick(
        " under torch.no_grad()", "（在 torch.no_grad() 下）"
    )

    def replay(implementation) -> dict:
        return triple(backward_under_no_grad(implementation, positional, keywords), text)

    with SPEC.diagnosing(replay, sizes_of(case)):
        judge_gradients(text, replay(kata), want, scales)


@convention("results follow the inputs' device.", zh="结果跟随输入的 dtype 和设备")
def test_results_follow_the_dtype_and_device_of_the_inputs(kata, other_device):
    """Each result has its input's shape, dtype and device (on "meta" without a GPU: no values)."""
    case = EDGES[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for dtype in FULL:

        def forward(device, dtype=dtype):
            return forward_call(forward_args(torch.Generator().manual_seed(0), case, dtype, device))

        def backward(device, dtype=dtype):
            return backward_args(torch.Generator().manual_seed(1), case, dtype, device)

        LN.on_device(
            kata,
            other_device,
            make=forward,
            expected=lambda device, forward=forward: {"output": forward_reference_of(*forward(device))},
            compare=SPEC.assert_close,
            symbol="layer_norm",
            sizes=sizes_of(case),
        )
        scales = gradient_scales(**backward("cpu"))

        def compare(got, want, *, call: str, what: str) -> None:
            assert_close(got, want, call=call, what=what, tolerance=grad_tolerance(want.dtype, scales[what]))

        LN.on_device(
            kata,
            other_device,
            make=lambda device, backward=backward: backward_call(backward(device)),
            expected=lambda device, backward=backward: ordered(backward_reference(**backward(device))),
            compare=compare,
            symbol="layer_norm_backward",
            sizes=sizes_of(case),
        )


def ordered(gradients: dict) -> dict:
    """The gradients in dependency order (see ORDER)."""
    return {name: gradients[name] for name in ORDER}


@convention("x, weight and bias (and layer_norm_backward's grad_output) are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Both functions, in every dtype, with and without a weight."""
    case = CASES.random(rng)[0]
    for dtype in (*FULL, *HALF):
        for weight in (True, False):
            forward = forward_call(forward_args(gen, case, dtype, "cpu", weight=weight, bias=weight, eps=1e-4))
            backward = backward_call(backward_args(gen, case, dtype, "cpu", weight=weight, eps=1e-4))
            for symbol, (positional, keywords) in (("layer_norm", forward), ("layer_norm_backward", backward)):
                with LN.judging(kata, *positional, symbol=symbol, sizes=sizes_of(case), **keywords) as call:
                    LN.assert_inputs_unchanged(call, positional, keywords, symbol=symbol)

"""dpo: the conventions sequence_log_probs and dpo_loss share: results on the inputs'
device, inputs left alone, float64 computed in float64 throughout."""

import torch

from judge.testing.spec import FLOAT64_RULE
from judge.testing.tiers import convention

from .common import (
    CASES,
    DEGENERATE,
    DPO,
    FULL,
    NAMES,
    RESULTS,
    SPEC,
    check_dpo,
    check_dpo_gradients,
    check_log_probs,
    check_log_probs_gradient,
    custom_ignore_index,
    dpo_kwargs,
    dpo_tolerances,
    log_probs_tolerance,
    make_extreme_logps,
    make_inputs,
    make_logps,
    randn,
    reference_dpo,
    reference_log_probs,
    sizes,
)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """sequence_log_probs (ordinary and large logits) and dpo_loss (ordinary and extreme
    log-probabilities), values and gradients, held to float64's own tolerances."""
    f64, throughout = torch.float64, {"float64_throughout": True}
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            logits, labels = make_inputs(gen, case, f64, ignore_index=ignore_index)
            check_log_probs(kata, case, logits, labels, ignore_index=ignore_index, **throughout)
            logits, labels = make_inputs(gen, case, f64, large=True)
            check_log_probs(kata, case, logits, labels, **throughout)
            upstream = randn(gen, case["B"], dtype=f64)
            check_log_probs_gradient(kata, case, logits, labels, upstream, **throughout)
            kwargs = dpo_kwargs(rng, smoothing=index % 2 == 0)
            logps = make_logps(gen, case["B"], f64)
            check_dpo(kata, logps, **kwargs, **throughout)
            check_dpo_gradients(kata, logps, upstream, **kwargs, **throughout)
            beta = rng.choice((0.1, 0.5, 1.0, 2.0))
            check_dpo(kata, make_extreme_logps(gen, case["B"], beta, f64), beta=beta, **throughout)


def fixed_inputs(case, device):
    """Logits and labels drawn from a fixed generator: a verdict on the meta stand-in must not depend on the seed."""
    return make_inputs(torch.Generator().manual_seed(0), case, torch.float32, device)


@convention("the result is on the logits' device.", zh="对数概率与 logits 在同一 device 上")
def test_log_probabilities_follow_the_device_of_the_logits(kata, other_device):
    """Masks and zeros made inside the kata must be made on the inputs' device: the first
    edge case, then T = 1 (nothing to predict: a sum of nothing)."""
    for case in (CASES.edges[0], DEGENERATE[0]):
        with case.judged():

            def compare(got, want, *, call, what, case=case):
                SPEC.assert_close(
                    got, want, call=call, what=what, tolerance=log_probs_tolerance(*fixed_inputs(case, "cpu"))
                )

            DPO.on_device(
                kata,
                other_device,
                make=lambda device, case=case: (fixed_inputs(case, device), {}),
                expected=lambda device, case=case: {
                    "log-probabilities": reference_log_probs(*fixed_inputs(case, device))
                },
                compare=compare,
                symbol="sequence_log_probs",
                sizes=sizes(case),
            )


@convention("the three results are on the inputs' device.", zh="dpo_loss 的结果与输入在同一 device 上")
def test_dpo_loss_results_follow_the_device_of_the_inputs(kata, other_device):
    for case in (CASES.edges[0], DEGENERATE[0]):
        with case.judged():

            def logps(device, case=case) -> dict:
                return make_logps(torch.Generator().manual_seed(0), case["B"], torch.float32, device)

            tolerances = dpo_tolerances(logps("cpu"), 0.1)

            def compare(got, want, *, call, what, tolerances=tolerances):
                SPEC.assert_close(got, want, call=call, what=what, tolerance=tolerances[what])

            DPO.on_device(
                kata,
                other_device,
                make=lambda device, logps=logps: (tuple(logps(device)[n] for n in NAMES), {"label_smoothing": 0.1}),
                expected=lambda device, logps=logps: {
                    k: v for k, v in reference_dpo(logps(device), label_smoothing=0.1).items() if k in RESULTS
                },
                compare=compare,
            )


@convention("the inputs are never modified.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every dtype, the default and a custom ignore_index (where a kata may convert, or
    replace ignored labels, in place); dpo_loss with and without label smoothing."""
    case = CASES.edges[0]
    for dtype in (torch.bfloat16, *FULL, torch.float16):
        for ignore_index in (-100, custom_ignore_index(rng, case)):
            logits, labels = make_inputs(gen, case, dtype, ignore_index=ignore_index)
            kwargs = {} if ignore_index == -100 else {"ignore_index": ignore_index}
            DPO.judging_inputs(kata, logits, labels, symbol="sequence_log_probs", sizes=sizes(case), **kwargs)
        logps = make_logps(gen, case["B"], dtype)
        for kwargs in ({}, {"beta": 0.5, "label_smoothing": 0.1}):
            DPO.judging_inputs(kata, *(logps[name] for name in NAMES), **kwargs)

"""moe: half precision (the routing softmax in float32, y, router_logits and the loss in the
inputs' dtype) and the float64 rule (float64 computed in float64 throughout, judged with
float64's own tolerances), for the layer and the loss."""

from __future__ import annotations

import torch

from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention

from .common import CASES, HALF, LOSS_CASES, SPEC, build, check, check_loss, check_loss_gradient, inputs, make_logits  # noqa: F401
from .test_layer import check_gradients


@convention(
    "float16 and bfloat16 work: the routing softmax in float32, y and router_logits in x's dtype.", zh="半精度下可用"
)
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, case, dtype)
            check(kata, built, inputs(gen, built, case, dtype))


@convention(
    "the loss is returned in router_logits' dtype (float16 and bfloat16 included)", zh="半精度下的 load_balancing_loss"
)
@dtypes(*HALF)
def test_load_balancing_loss_in_half_precision(kata, rng, gen, dtype):
    """float16 and bfloat16 logits: the softmax in float32, the loss rounded to their dtype."""
    for case in LOSS_CASES.random(rng, 3):
        with case.judged():
            check_loss(kata, case, make_logits(gen, case, dtype))


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """y, router_logits, the gradients, the loss and its gradient within float64's own tolerances."""
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            built = build(gen, case, torch.float64)
            check(kata, built, inputs(gen, built, case, torch.float64), float64_throughout=True)
            if index in (0, 1):
                check_gradients(kata, gen, case, float64_throughout=True)
    for case in LOSS_CASES.cases(rng, 2):
        with case.judged():
            logits = make_logits(gen, case)
            check_loss(kata, case, logits, float64_throughout=True)
            check_loss_gradient(kata, case, logits, float(randn(gen, 1, dtype=torch.float64)), float64_throughout=True)

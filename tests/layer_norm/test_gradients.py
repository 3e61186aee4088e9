"""layer_norm: layer_norm_backward's gradients against autograd through F.layer_norm; the SPEC,
references, tolerances and checks are in common.py."""

from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    EXPLICIT_EPS,
    FULL,
    SMALL,
    SPEC,  # noqa: F401 - the kata's spec, for the kata fixture
    backward_args,
    check_backward,
    passed_as,
)


@core(zh="梯度与经过 F.layer_norm 的 autograd 一致")
@dtypes(*FULL)
def test_gradients_match_autograd_through_f_layer_norm(kata, rng, gen, dtype, device):
    """With a weight: grad_input, grad_weight and grad_bias, the default eps."""
    for case in CASES.cases(rng):
        with case.judged():
            shape = passed_as(rng, tuple(case["shape"]))
            check_backward(kata, backward_args(gen, case, dtype, device, shape=shape), case)


@core(zh="没有 weight 时 grad_weight 和 grad_bias 为 None")
@dtypes(*FULL)
def test_without_a_weight_grad_weight_and_grad_bias_are_none(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_backward(kata, backward_args(gen, case, dtype, device, weight=False), case)


@core(zh="反向传播中，在方差很小的行上 eps 位于平方根之内")
@dtypes(*FULL)
def test_backward_eps_goes_inside_the_square_root_on_rows_of_small_variance(kata, rng, gen, dtype, device):
    """Every row of spread 3e-3; eps from 1e-6 to 1e-3 given explicitly, with and without a weight."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            args = backward_args(
                gen, case, dtype, device, spread=SMALL, weight=index % 3 != 1, eps=rng.choice(EXPLICIT_EPS)
            )
            check_backward(kata, args, case)

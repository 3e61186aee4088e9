"""layer_norm: the forward against F.layer_norm; the SPEC, references, tolerances and checks are
in common.py."""

from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    EXPLICIT_EPS,
    FULL,
    SMALL,
    SPEC,  # noqa: F401 - the kata's spec, for the kata fixture
    check_forward,
    forward_args,
    passed_as,
)


@core(zh="带 weight 和 bias 时与 F.layer_norm 一致")
@dtypes(*FULL)
def test_matches_f_layer_norm_with_a_weight_and_a_bias(kata, rng, gen, dtype, device):
    """The default eps (1e-5), normalized_shape as an int, tuple, list or torch.Size."""
    for case in CASES.cases(rng):
        with case.judged():
            shape = passed_as(rng, tuple(case["shape"]))
            check_forward(kata, forward_args(gen, case, dtype, device, shape=shape), case)


@core(zh="weight 和 bias 都可以省略")
@dtypes(*FULL)
def test_weight_and_bias_are_each_optional(kata, rng, gen, dtype, device):
    """None for either or both: no scaling, nothing added."""
    combinations = [(False, False), (True, False), (False, True)]
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            weight, bias = combinations[index % 3]
            check_forward(kata, forward_args(gen, case, dtype, device, weight=weight, bias=bias), case)


@core(zh="在方差很小的行上，eps 位于平方根之内")
@dtypes(*FULL)
def test_eps_goes_inside_the_square_root_on_rows_of_small_variance(kata, rng, gen, dtype, device):
    """Every row of spread 3e-3 (a variance of 9e-6); eps from 1e-6 to 1e-3, given explicitly."""
    for case in CASES.cases(rng):
        with case.judged():
            eps = rng.choice(EXPLICIT_EPS)
            check_forward(kata, forward_args(gen, case, dtype, device, eps=eps, spreads=(SMALL,)), case)

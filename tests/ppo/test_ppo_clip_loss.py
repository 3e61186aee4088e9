"""ppo: ppo_clip_loss against its formula in float64, values and gradients (see common.py)."""

from judge.testing.spec import dtypes
from judge.testing.tiers import convention, core

from .common import CASES, FULL, HALF, SPEC, check_loss, check_loss_gradients, loss_options, make_batch  # noqa: F401


@core(zh="ppo_clip_loss 在 bool 和浮点掩码下都与公式一致")
@dtypes(*FULL)
def test_ppo_clip_loss_matches_the_formula_with_bool_and_float_masks(kata, rng, gen, dtype, device):
    """Ratios outside the clip range on both sides with advantages of both signs, values far
    from old_values on both sides; the defaults and random clip settings; a row all padding."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            options = loss_options(rng, index)
            for mask_as in ("float", "bool"):
                check_loss(kata, make_batch(gen, case, dtype, device, mask_as=mask_as, options=options))


@core(zh="传到 logps 和 values 的梯度与对公式做 autograd 的结果一致")
@dtypes(*FULL)
def test_gradients_reach_logps_and_values_as_autograd_through_the_formula(kata, rng, gen, dtype):
    """The gradient of each result (total, policy_loss, value_loss) with respect to logps and
    values: the min, both clamps and the max decide which entries get a gradient."""
    for index, case in enumerate((*CASES.edges[:2], *CASES.random(rng, 2))):
        with case.judged():
            options = loss_options(rng, index)
            check_loss_gradients(
                kata, make_batch(gen, case, dtype, mask_as=rng.choice(("bool", "float")), options=options)
            )


@convention(
    "float16 and bfloat16 inputs are computed in float32 and the results cast back to their dtype.",
    zh="半精度下 ppo_clip_loss 用 float32 计算，再把结果转换回原 dtype",
)
@dtypes(*HALF)
def test_ppo_clip_loss_in_half_precision_is_computed_in_float32_and_cast_back(kata, rng, gen, dtype):
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            options = loss_options(rng, index)
            check_loss(kata, make_batch(gen, case, dtype, mask_as=("float", "bool")[index % 2], options=options))

"""ppo: the conventions gae and ppo_clip_loss share: results on the inputs' device, inputs
left alone, float64 computed in float64 throughout."""

import torch

from judge.testing.spec import FLOAT64_RULE
from judge.testing.tiers import convention

from .common import (
    CASES,
    FULL,
    HALF,
    PPO,
    SPEC,  # noqa: F401 - the kata fixture reads it
    assert_close,
    check_gae,
    check_loss,
    check_loss_gradients,
    counted,
    gae_reference,
    gae_split,
    gae_tolerance,
    loss_expected,
    loss_scales,
    loss_split,
    make_batch,
    make_rollout,
    tolerance,
)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """gae's results, ppo_clip_loss's and its gradients, held to float64's own tolerance."""
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            form = ("bool", "float")[index % 2]
            check_gae(kata, make_rollout(gen, case, torch.float64, dones_as=form), float64_throughout=True)
            batch = make_batch(gen, case, torch.float64, mask_as=form)
            check_loss(kata, batch, float64_throughout=True)
            check_loss_gradients(kata, batch, float64_throughout=True)


# fixed inputs: a verdict on the meta stand-in must not depend on the seed
FORMS = {torch.float32: "bool", torch.float64: "float"}  # dones and the mask as bool, then as floats


def fixed_rollout(dtype, device) -> dict:
    return make_rollout(torch.Generator().manual_seed(0), CASES.edges[0], dtype, device, dones_as=FORMS[dtype])


def fixed_batch(dtype, device) -> dict:
    return make_batch(torch.Generator().manual_seed(0), CASES.edges[0], dtype, device, mask_as=FORMS[dtype])


@convention("both results are on the inputs' device.", zh="gae 的结果跟随输入所在的设备")
def test_gae_results_follow_the_device_of_the_inputs(kata, other_device):
    """On a GPU, the values too; on "meta" (no GPU) the kinds of the results only."""
    for dtype in FULL:
        allowed = gae_tolerance(*gae_reference(**fixed_rollout(dtype, "cpu")))

        def compare(got, want, *, call, what, allowed=allowed):
            assert_close(got, want, call=call, what=what, tolerance=allowed)

        PPO.on_device(
            kata,
            other_device,
            make=lambda device, dtype=dtype: gae_split(fixed_rollout(dtype, device)),
            expected=lambda device, dtype=dtype: gae_reference(**fixed_rollout(dtype, device))[0],
            compare=compare,
            symbol="gae",
        )


@convention("the three results are on the inputs' device.", zh="ppo_clip_loss 的结果跟随输入所在的设备")
def test_ppo_clip_loss_results_follow_the_device_of_the_inputs(kata, other_device):
    """On a GPU, the values too; on "meta" (no GPU) the kinds of the results only."""
    for dtype in FULL:
        scales = loss_scales(fixed_batch(dtype, "cpu"))

        def compare(got, want, *, call, what, dtype=dtype, scales=scales):
            assert_close(
                got, want, call=call, what=what, tolerance=tolerance(dtype, scales[what], float64_throughout=False)
            )

        PPO.on_device(
            kata,
            other_device,
            make=lambda device, dtype=dtype: loss_split(fixed_batch(dtype, device)),
            expected=lambda device, dtype=dtype: loss_expected(fixed_batch(dtype, device)),
            compare=compare,
            symbol="ppo_clip_loss",
            sizes=counted(fixed_batch(dtype, "cpu")),
        )


@convention("the inputs are never modified.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every dtype, dones and the mask as bool and as floats, where a kata may convert in place."""
    case = CASES.random(rng)[0]
    for dtype in (*FULL, *HALF):
        for form in ("bool", "float"):
            positional, keywords = gae_split(make_rollout(gen, case, dtype, dones_as=form))
            PPO.judging_inputs(kata, *positional, symbol="gae", **keywords)
            batch = make_batch(gen, case, dtype, mask_as=form)
            positional, keywords = loss_split(batch)
            PPO.judging_inputs(kata, *positional, symbol="ppo_clip_loss", sizes=counted(batch), **keywords)

"""dpo: dpo_loss against the sigmoid loss written with F.logsigmoid in float64 (see common.py)."""

import torch

from judge.language import pick
from judge.testing.spec import dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    DPO,
    FULL,
    HALF,
    NAMES,
    RESULTS,
    SPEC,
    check_dpo,
    check_dpo_gradients,
    dpo_kwargs,
    dpo_loss_with_inputs_requiring_grad,
    make_extreme_logps,
    make_logps,
    randn,
)


@core(zh="dpo_loss 与 sigmoid 损失一致")
@dtypes(*FULL)
def test_dpo_loss_matches_the_sigmoid_loss(kata, rng, gen, dtype, device):
    """losses = -logsigmoid(beta * z) with z = (pi_c - pi_r) - (ref_c - ref_r); the rewards
    beta * (pi - ref); beta at its default (0.1) or another value."""
    for case in CASES.cases(rng):
        with case.judged():
            check_dpo(kata, make_logps(gen, case["B"], dtype, device), **dpo_kwargs(rng, smoothing=False))


@core(zh="label_smoothing 混入偏好翻转后的损失")
@dtypes(*FULL)
def test_label_smoothing_mixes_in_the_loss_of_the_flipped_preference(kata, rng, gen, dtype, device):
    """Conservative DPO: -logsigmoid(beta * z) * (1 - eps) - logsigmoid(-beta * z) * eps."""
    for case in CASES.cases(rng):
        with case.judged():
            check_dpo(kata, make_logps(gen, case["B"], dtype, device), **dpo_kwargs(rng, smoothing=True))


@core(zh="beta * z 大到 1e3 时损失和梯度仍然有限")
@dtypes(*FULL)
def test_beta_z_as_large_as_1e3_keeps_losses_and_gradients_finite(kata, rng, gen, dtype, device):
    """beta * z from -1e3 to 1e3: log(sigmoid(x)) is log(0) = -inf below about -88 (float32)
    or -709 (float64), and its gradient NaN; F.logsigmoid stays finite."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            beta = rng.choice((0.1, 0.5, 1.0, 2.0))
            kwargs = {"beta": beta} | ({"label_smoothing": 0.2} if rng.random() < 0.5 else {})
            logps = make_extreme_logps(gen, case["B"], beta, dtype, device)
            check_dpo(kata, logps, **kwargs)
            upstream = randn(gen, case["B"], dtype=dtype, device=device)
            check_dpo_gradients(kata, logps, upstream, **kwargs)


@convention(
    "float16 and bfloat16 inputs are computed in float32 (or better: ...) and the results returned in their dtype.",
    zh="半精度对数概率给出同一 dtype 的结果",
)
@dtypes(*HALF)
def test_half_precision_log_probabilities_give_results_in_their_dtype(kata, rng, gen, dtype, device):
    """float16 and bfloat16 inputs: computed in float32 or better (z subtracts log-probabilities
    of hundreds: half precision rounds their differences by up to a unit), returned in their dtype."""
    for case in CASES.cases(rng):
        with case.judged():
            kwargs = dpo_kwargs(rng, smoothing=rng.random() < 0.5)
            check_dpo(kata, make_logps(gen, case["B"], dtype, device), **kwargs)


@convention("the rewards are for logging only: they must carry no gradient", zh="奖励不携带梯度")
def test_the_rewards_carry_no_gradient(kata, rng, gen):
    """chosen_rewards and rejected_rewards are logged (reward accuracy, margins), never trained
    through: they must not require grad, even when every input does (while the losses do)."""
    case = CASES.random(rng)[0]
    logps = make_logps(gen, case["B"], torch.float32)
    kwargs = dpo_kwargs(rng, smoothing=False)
    args = tuple(logps[name] for name in NAMES)
    text = DPO.text("dpo_loss", args, kwargs) + pick(", every input requiring grad", "，所有输入都 requires_grad=True")

    def check(implementation) -> dict:
        got = dpo_loss_with_inputs_requiring_grad(implementation, args, kwargs)
        DPO.outputs_of("dpo_loss")(got["result"], text)  # a triple, or it says so
        flags = dict(zip(RESULTS, got["requires_grad"]))
        for name in ("chosen_rewards", "rejected_rewards"):
            if flags[name]:
                raise AssertionError(
                    pick(
                        f"{text}: {name} requires grad; the rewards are for logging only: detach them "
                        "(.detach()) so that no gradient can flow through them",
                        f"{text}：{name} 需要梯度（requires_grad=True）；奖励只用于记录日志：请把它们 detach（.detach()），"
                        "让梯度无法流经它们",
                    )
                )
        if not flags["losses"]:
            raise AssertionError(
                pick(
                    f"{text}: losses does not require grad; autograd lost track of the inputs "
                    "(no .detach(), .item(), numpy or torch.no_grad() on the way to it)",
                    f"{text}：losses 不需要梯度（requires_grad=False）；autograd 跟丢了输入"
                    "（得到它的路径上不能有 .detach()、.item()、numpy 或 torch.no_grad()）",
                )
            )
        return {}

    with SPEC.diagnosing(check, {}):
        check(kata)

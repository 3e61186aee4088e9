"""sampling: filter_logits against an independent float64 formulation of Hugging Face's
temperature, top-k and top-p warpers (see common.py): which tokens survive, exactly, then
the kept values."""

import torch

from judge.language import pick
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention, core

from .common import (
    FILTER,
    FLOAT64_THROUGHOUT,
    FULL,
    HALF,
    SPEC,
    check_filter,
    draw_logits,
    filter_sizes,
    judge_filter,
    make_inputs,
    randn,
    reference_filter,
    top_p_is_decided,
)


@core(zh="filter_logits 与 float64 下的 Hugging Face warper 一致")
@dtypes(*FULL)
def test_filter_logits_matches_hugging_faces_warpers_in_float64(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng, edges=dtype == torch.float32):
        with case.judged():
            logits, kwargs = make_inputs(gen, case, dtype, device)
            check_filter(kata, logits, **kwargs)


@core(zh="默认参数下 filter_logits 原样返回 logits")
def test_filter_logits_with_the_defaults_returns_the_logits_unchanged(kata, rng, gen):
    V = rng.randrange(2, 40)
    logits = draw_logits(
        gen, [rng.randrange(1, 6), V], torch.float32, banned=rng.randrange(0, V // 2 + 1) if V > 2 else 0
    )
    check_filter(kata, logits)


@core(zh="filter_logits 的每个过滤器单独使用")
def test_filter_logits_each_filter_alone(kata, rng, gen):
    """One filter at a time, so a slip in one cannot hide behind another."""
    V = rng.randrange(10, 30)
    logits = draw_logits(gen, [rng.randrange(3, 7), V], torch.float64)
    for kwargs, low, high in (
        ({"temperature": round(rng.uniform(0.3, 3.0), 2)}, 1.0, 1.0),
        ({"top_k": rng.randrange(2, V)}, 1.0, 1.0),
        ({}, 0.3, 0.95),
        ({"min_tokens_to_keep": rng.randrange(2, 5)}, 0.01, 0.1),  # top_p alone would keep one token
    ):
        top_p = round(rng.uniform(low, high), 3)
        while not top_p_is_decided(logits, top_p, **kwargs):
            top_p = round(rng.uniform(low, high), 3)
        check_filter(kata, logits, **kwargs, **({"top_p": top_p} if top_p < 1.0 else {}))


@convention(
    "float16 and bfloat16 logits are computed in float32 and returned in their own dtype.",
    zh="半精度 logits 在 float32 中计算，并以原 dtype 返回",
)
@dtypes(*HALF)
def test_filter_logits_in_half_precision_computes_in_float32_and_returns_its_dtype(kata, rng, gen, dtype):
    for case in SPEC.cases.cases(rng, 2, edges=False) + [SPEC.cases.edges[0], SPEC.cases.edges[4]]:
        with case.judged():
            logits, kwargs = make_inputs(gen, case, dtype)
            check_filter(kata, logits, **kwargs)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """Every edge case and two draws, the kept values held to FLOAT64_THROUGHOUT (see common.py)."""
    for case in SPEC.cases.cases(rng, 2):
        with case.judged():
            logits, kwargs = make_inputs(gen, case, torch.float64)
            check_filter(kata, logits, **kwargs, tolerance=FLOAT64_THROUGHOUT)


@convention(
    "bad settings raise ValueError: temperature <= 0, top_k < 0, top_p outside (0, 1].",
    zh="filter_logits 遇到非法设置时抛出 ValueError",
)
def test_filter_logits_rejects_bad_settings_with_value_error(kata, gen):
    logits = randn(gen, 2, 5)
    for kwargs, reason in (
        ({"temperature": 0.0}, pick("filter_logits needs temperature > 0", "filter_logits 要求 temperature > 0")),
        ({"temperature": -0.5}, pick("a negative temperature", "temperature 为负")),
        ({"top_k": -1}, pick("top_k < 0", "top_k 小于 0")),
        ({"top_p": 0.0}, pick("top_p must be in (0, 1]", "top_p 必须在 (0, 1] 内")),
        ({"top_p": 1.5}, pick("top_p must be in (0, 1]", "top_p 必须在 (0, 1] 内")),
        ({"top_p": -0.2}, pick("top_p must be in (0, 1]", "top_p 必须在 (0, 1] 内")),
    ):
        FILTER.assert_raises(kata, ValueError, logits, reason=reason, **kwargs)


@convention("the result is made on the logits' device.", zh="filter_logits 的结果位于 logits 所在的设备上")
def test_filter_logits_result_follows_the_device_of_the_logits(kata, other_device):
    case = SPEC.cases.edges[0]  # fixed, drawn from a fixed generator: a verdict on meta must not depend on the seed
    logits, kwargs = make_inputs(torch.Generator().manual_seed(0), case, torch.float32)
    want, info = reference_filter(logits, **kwargs)

    def compare(got, expected, *, call, what):
        judge_filter(got, expected, info, call=call, kwargs=kwargs)

    FILTER.on_device(
        kata,
        other_device,
        make=lambda device: ((logits.to(device),), kwargs),
        expected=lambda device: {"result": want.to(dtype=logits.dtype, device=device)},
        compare=compare,
        sizes=filter_sizes(logits, kwargs),
    )


@convention("logits is never changed in place.", zh="filter_logits 不修改 logits")
def test_filter_logits_does_not_modify_its_logits(kata, gen):
    """With tokens already -inf, where a kata may divide or mask in place; in float32 and
    float64, which need no conversion (an in-place op there writes into the logits), and in
    bfloat16."""
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        logits, kwargs = make_inputs(gen, SPEC.cases.edges[4], dtype)
        with FILTER.judging(kata, logits, sizes=filter_sizes(logits, kwargs), **kwargs) as call:
            FILTER.assert_inputs_unchanged(call, (logits,), {})

"""dpo: sequence_log_probs against -F.cross_entropy on the shifted logits and labels in
float64 (see common.py)."""

import torch

from judge.testing.spec import dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    DEGENERATE,
    FULL,
    HALF,
    SPEC,  # noqa: F401 - the kata fixture reads it
    check_log_probs,
    check_log_probs_gradient,
    custom_ignore_index,
    make_inputs,
    randn,
)


@core(zh="sequence_log_probs 对移位后各标签的对数概率求和")
@dtypes(*FULL)
def test_sequence_log_probs_sums_the_shifted_labels_log_probabilities(kata, rng, gen, dtype, device):
    """The logits at t predict the label at t + 1; labels equal to -100 (the default
    ignore_index: prompts, padding) are left out."""
    for case in CASES.cases(rng):
        with case.judged():
            check_log_probs(kata, case, *make_inputs(gen, case, dtype, device))


@core(zh="自定义 ignore_index 即使是合法 token 也会被遵守")
@dtypes(*FULL)
def test_a_custom_ignore_index_is_honoured_even_when_it_is_a_token(kata, rng, gen, dtype, device):
    """ignore_index 0, V - 1 (legal token ids, which every label holding them must skip) or -1."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            # a legal token first, V - 1: a kata that still compares with -100 then adds the
            # log-probability of token V - 1 at ignored positions (with 0 it would look like
            # one that never zeroes them, which adds token 0's; with -1 it would crash, as one
            # that gathers with the ignored labels does)
            ignore_index = custom_ignore_index(rng, case, index)
            logits, labels = make_inputs(gen, case, dtype, device, ignore_index)
            check_log_probs(kata, case, logits, labels, ignore_index=ignore_index)


@core(zh="大到 1e4 的 logits 既不上溢也不下溢")
@dtypes(*FULL)
def test_logits_as_large_as_1e4_neither_overflow_nor_underflow(kata, rng, gen, dtype, device):
    """Positions offset by up to +-7000, tokens spread by 1000: exp overflows without each
    position's max subtracted, and log(softmax) underflows to log(0) = -inf."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check_log_probs(kata, case, *make_inputs(gen, case, dtype, device, large=True))


@convention(
    "float16 and bfloat16 logits are computed in float32 (or better) and the result returned in the logits' dtype.",
    zh="半精度 logits 以 float32 计算",
)
@dtypes(*HALF)
def test_half_precision_logits_are_computed_in_float32(kata, rng, gen, dtype, device):
    """float16 and bfloat16 logits: computed in float32 or better, the result in their own
    dtype; ordinary logits (the confident case among them), then large ones."""
    for case in CASES.cases(rng):
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            logits, labels = make_inputs(gen, case, dtype, device, ignore_index)
            check_log_probs(kata, case, logits, labels, ignore_index=ignore_index)
    for case in CASES.random(rng):
        with case.judged():
            check_log_probs(kata, case, *make_inputs(gen, case, dtype, device, large=True))


@convention(
    "a sequence with nothing to predict (T = 1, or every shifted label ignored) gives 0.",
    zh="没有可预测内容的序列得 0",
)
@dtypes(*FULL)
def test_a_sequence_with_nothing_to_predict_gives_0(kata, rng, gen, dtype, device):
    """T = 1, and a row whose every label is ignored: with the default ignore_index, a custom
    one, large logits; and the gradient (0 for such a row)."""
    for case in DEGENERATE:
        with case.judged():
            check_log_probs(kata, case, *make_inputs(gen, case, dtype, device))
            ignore_index = custom_ignore_index(rng, case)
            logits, labels = make_inputs(gen, case, dtype, device, ignore_index)
            check_log_probs(kata, case, logits, labels, ignore_index=ignore_index)
            logits, labels = make_inputs(gen, case, dtype, device, large=True)
            check_log_probs(kata, case, logits, labels)
            upstream = randn(gen, case["B"], dtype=dtype)
            check_log_probs_gradient(kata, case, logits.cpu(), labels.cpu(), upstream)

"""sampling: sample_next_token judged by its draws (see common.py): greedy at temperature 0,
the frequencies of the filtered distribution, rows independent, no removed token; every
random number from the generator it is given."""

import math

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, check_tensor_kind, judge_on_device
from judge.testing.tiers import convention, core

from .common import (
    SPEC,
    assert_sampling_leaves_logits_alone,
    assert_sampling_raises,
    check_never_draws_a_removed_token,
    draw_logits,
    make_inputs,
    randn,
    reference_filter,
    repeated_rows,
    sample,
    sample_text,
    sampled_from_two_states,
    sampling_sizes,
    top_p_is_decided,
)

GENERATOR_ONLY = (
    "every random number comes from `generator`: the global RNG (torch.manual_seed's) is left untouched, "
    "and the same generator state gives the same tokens."
)


@core(zh="temperature 为 0 时贪心地取每行的 argmax")
def test_temperature_zero_is_greedy_the_argmax_of_each_row(kata, rng, gen):
    V = rng.randrange(5, 40)  # flat logits (std 0.5): a draw would often miss the argmax
    logits = draw_logits(gen, [rng.randrange(12, 20), V], torch.float32, banned=1, std=0.5)
    kwargs = {"temperature": 0.0, "top_k": rng.choice([0, V - 1]), "top_p": rng.choice([1.0, 0.99])}
    seed = rng.randrange(2**31)
    want = logits.argmax(-1)

    def greedy(implementation) -> dict:
        return {"tokens": sample(implementation, logits, seed, kwargs)[1]}

    with SPEC.diagnosing(greedy, sampling_sizes(logits, kwargs)):
        call, got, _ = sample(kata, logits, seed, kwargs)
        if not torch.equal(got, want):
            row = int((got != want).nonzero()[0])
            raise Mismatch(
                pick(
                    f"{call} is not greedy: at temperature 0 each row's token is its argmax, no draw; "
                    f"{int((got != want).sum())} of {len(want)} rows differ, first row {row}: got token "
                    f"{int(got[row])}, expected {int(want[row])}",
                    f"{call} 不是贪心的：temperature 为 0 时每行的 token 就是该行的 argmax，不抽样；"
                    f"{len(want)} 行中有 {int((got != want).sum())} 行不同，第一个在第 {row} 行：得到 token "
                    f"{int(got[row])}，期望 {int(want[row])}",
                ),
                what="tokens",
                actual=got,
                expected=want,
            )


@core(zh="从不抽到已被移除的 token")
def test_never_draws_a_removed_token(kata, rng, gen):
    """2400 draws from 6 distinct rows (two with tokens already -inf): none outside the filters."""
    check_never_draws_a_removed_token(kata, gen, rng, torch.float32)


@core(zh="抽样频率符合过滤后的分布，且各行相互独立")
def test_frequencies_match_the_filtered_distribution_and_rows_are_independent(kata):
    """On fixed seeds: 4000 rows, two distributions A and B interleaved (rows 0, 2, 4... are A),
    one draw each in one call. Each token's count must be within 5 standard errors of its
    probability after the filters, a removed token never drawn; and rows must be independent:
    two A rows (or an A row and the B row beside it) agree as often as independent draws would."""
    gen = torch.Generator().manual_seed(20240611)
    V, n = 7, 2000
    logits, distinct = repeated_rows(gen, 2, V, n, std=1.2)
    kwargs = {"temperature": 0.8, "top_k": 6, "top_p": 0.97}
    assert top_p_is_decided(distinct, **kwargs)
    filtered, _ = reference_filter(distinct, **kwargs)
    probs = torch.softmax(filtered, -1)  # (2, V) float64, 0 where removed

    def check(implementation) -> dict:
        call, tokens, _ = sample(implementation, logits, 7, kwargs)
        tokens = tokens.cpu()
        for index, name in enumerate("AB"):
            drawn = tokens[index::2]
            counts = torch.bincount(drawn.clamp(0, V - 1), minlength=V).double()
            p = probs[index]
            for token in range(V):
                expected, error = n * float(p[token]), math.sqrt(n * float(p[token] * (1 - p[token])))
                if abs(counts[token] - expected) > 5 * error:
                    off = (
                        pick("a removed token", "这是已被移除的 token")
                        if p[token] == 0
                        else pick(
                            f"{abs(counts[token] - expected) / error:.1f} standard errors off",
                            f"偏离了 {abs(counts[token] - expected) / error:.1f} 个标准误",
                        )
                    )
                    raise AssertionError(
                        pick(
                            f"{call}: the {n} rows of distribution {name} drew token {token} {int(counts[token])} "
                            f"times, expected {expected:.0f} +- {error:.0f} "
                            f"(probability {float(p[token]):.4f} after the filters): {off}. "
                            f"Counts {counts.long().tolist()}, expected {[round(n * float(q)) for q in p]}",
                            f"{call}：分布 {name} 的 {n} 行抽到 token {token} 共 {int(counts[token])} 次，"
                            f"期望 {expected:.0f} +- {error:.0f} 次"
                            f"（过滤后的概率为 {float(p[token]):.4f}）：{off}。"
                            f"各 token 的次数 {counts.long().tolist()}，期望 {[round(n * float(q)) for q in p]}",
                        )
                    )
        for first, second, label, p, q in (
            (tokens[0::4], tokens[2::4], pick("two rows of distribution A", "分布 A 的两行"), probs[0], probs[0]),
            (
                tokens[0::2],
                tokens[1::2],
                pick("each A row and the B row after it", "每个 A 行与它后面的 B 行"),
                probs[0],
                probs[1],
            ),
        ):
            same = float((p * q).sum())  # how often two independent draws agree
            pairs = len(first)
            agree = int((first == second).sum())
            error = math.sqrt(pairs * same * (1 - same))
            if abs(agree - pairs * same) > 5 * error:
                raise AssertionError(
                    pick(
                        f"{call}: {label} drew the same token in {agree} of {pairs} pairs; independent draws agree "
                        f"{pairs * same:.0f} +- {error:.0f} times: each row needs its own random numbers",
                        f"{call}：{label}在 {pairs} 对中有 {agree} 对抽到了相同的 token；独立抽样应相同 "
                        f"{pairs * same:.0f} +- {error:.0f} 次：每一行都需要自己的随机数",
                    )
                )
        return {}

    with SPEC.diagnosing(check, {"B": len(logits), "V": V}):
        check(kata)


@convention(GENERATOR_ONLY, zh="抽样不动全局 RNG")
def test_sampling_leaves_the_global_rng_untouched(kata, rng, gen):
    """Whether the call moved the global RNG is observed where the kata runs (its state before
    and after the call, compared there): that observation is the kata process's word."""
    logits = draw_logits(gen, [16, 10], torch.float32)
    kwargs = {"temperature": 1.2, "top_k": 6, "top_p": 0.95}
    seed = rng.randrange(2**31)

    def check(implementation) -> dict:
        call, _, got = sample(implementation, logits, seed, kwargs)
        if got["global rng moved"]:
            raise AssertionError(
                pick(
                    f"{call} drew from the global RNG (torch.get_rng_state() changed): pass "
                    "generator=generator to every random call (torch.multinomial, torch.rand, ...)",
                    f"{call} 用了全局 RNG（torch.get_rng_state() 变了）：每个随机调用"
                    "（torch.multinomial、torch.rand……）都要传入 generator=generator",
                )
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


@convention(GENERATOR_ONLY, zh="相同的 generator 状态给出相同的 token，不同的状态给出不同的 token")
def test_the_same_generator_state_gives_the_same_tokens_and_another_state_others(kata, rng, gen):
    """One scenario plays the story (a call, the generator set back, the call again, then a
    generator seeded differently) and returns the three calls' tokens."""
    logits = draw_logits(gen, [64, 8], torch.float32, std=1.0)
    kwargs = {"temperature": 1.5, "top_k": 7, "top_p": 0.98}
    seed = rng.randrange(2**31)
    call = sample_text(logits, kwargs)

    def check(implementation) -> dict:
        got = sampled_from_two_states(implementation, logits, seed, kwargs)
        expected = torch.empty(logits.shape[:-1], dtype=torch.int64)
        for what in ("first", "again", "other"):
            check_tensor_kind(got[what], expected, call=call, what="tokens")
        first, again, other = got["first"], got["again"], got["other"]
        if not torch.equal(first, again):
            raise AssertionError(
                pick(
                    f"{call} gave other tokens from the same generator state ({int((first != again).sum())} of "
                    f"{len(first)} rows differ): draw every random number from `generator`, nothing else",
                    f"{call} 在相同的 generator 状态下给出了不同的 token（{len(first)} 行中有 "
                    f"{int((first != again).sum())} 行不同）：所有随机数都只能从 `generator` 中抽取",
                )
            )
        if torch.equal(first, other):
            raise AssertionError(
                pick(
                    f"{call} gave the very same {len(first)} tokens from two generators seeded differently: "
                    "the draws must come from `generator` (not a generator of your own, nor a fixed seed)",
                    f"{call} 用两个种子不同的 generator 给出了完全相同的 {len(first)} 个 token："
                    "抽样必须来自 `generator`（不能用自己建的 generator，也不能用固定的种子）",
                )
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


@convention("float16 and bfloat16 logits are handled in float32.", zh="从 bfloat16 logits 中也从不抽到已被移除的 token")
def test_never_draws_a_removed_token_from_bfloat16_logits(kata, rng, gen):
    """As the core test, on bfloat16 logits."""
    check_never_draws_a_removed_token(kata, gen, rng, torch.bfloat16)


@convention("a negative temperature raises ValueError.", zh="sample_next_token 遇到负的 temperature 时抛出 ValueError")
def test_sample_next_token_rejects_a_negative_temperature_with_value_error(kata, gen):
    assert_sampling_raises(
        kata, randn(gen, 3, 6), {"temperature": -0.7}, reason=pick("a negative temperature", "temperature 为负")
    )


@convention("the tokens are made on the logits' device.", zh="sample_next_token 返回的 token 位于 logits 所在的设备上")
def test_sample_next_token_tokens_follow_the_device_of_the_logits(kata, other_device):
    """On CUDA with a CUDA generator; on "meta" (no GPU here) with a CPU one: shapes only.
    Fixed logits and seeds: a verdict on the meta stand-in must not depend on the seed."""
    logits = draw_logits(torch.Generator().manual_seed(0), [5, 9], torch.float32)
    for seed, kwargs in ((11, {"temperature": 0.0}), (12, {"temperature": 0.9, "top_k": 5, "top_p": 0.9})):

        def run(device, check, seed=seed, kwargs=kwargs) -> None:
            on_device = logits.to(device)
            generator_device = "cpu" if device == "meta" else device

            def tokens(implementation) -> dict:
                found = sample(implementation, on_device, seed, kwargs, generator_device=generator_device, kind=False)
                return {"tokens": found[1]}

            with SPEC.diagnosing(tokens, sampling_sizes(logits, kwargs)):
                call, got, _ = sample(kata, on_device, seed, kwargs, generator_device=generator_device, kind=False)
                check(call, {"tokens": got})

        judge_on_device(
            run,
            other_device,
            expected=lambda device: {"tokens": torch.empty(logits.shape[:-1], dtype=torch.int64, device=device)},
            compare=check_tensor_kind,
        )


@convention("logits is never changed in place.", zh="sample_next_token 不修改 logits")
def test_sample_next_token_does_not_modify_its_logits(kata, rng, gen):
    """With tokens already -inf, where a kata may divide or mask in place; float32 and float64
    (no conversion needed: an in-place op writes into the logits) and bfloat16; greedy too."""
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        logits, kwargs = make_inputs(gen, SPEC.cases.edges[4], dtype)
        for sampled_kwargs in ({k: kwargs[k] for k in ("temperature", "top_k", "top_p")}, {"temperature": 0.0}):
            assert_sampling_leaves_logits_alone(kata, logits, rng.randrange(2**31), sampled_kwargs)

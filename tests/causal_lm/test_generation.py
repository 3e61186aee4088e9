"""causal_lm: generation, each story one `generating` (or `feeding`) scenario returning its
trace (see common.py): greedy tokens against the reference's, with and without the cache;
what each step feeds the model; sampling within top_k, at a temperature near 0, and from the
generator only."""

import math

import torch

from judge.language import pick
from judge.testing.checks import Inconclusive, Mismatch
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    MARGIN,
    SPEC,
    answer,
    build,
    feeding,
    one_thread,  # noqa: F401 - an autouse fixture
    token_ids,
)
from .judging import (
    check_greedy,
    check_tokens_form,
    decided_prompt,
    generate_text,
    generated,
    generation,
    generation_sizes,
    judge_generation,
    run_text,
)

GENERATOR_ONLY = (
    "every random number generate draws comes from `generator`: given one, torch's global RNG is left untouched, "
    "and the same generator state gives the same tokens."
)


@core(zh="贪心生成与参考一致（带缓存和不带缓存）")
def test_greedy_generation_matches_the_reference_with_and_without_the_cache(kata, rng, gen):
    """temperature=0: the prompt, then the argmax of the last position's logits step by step,
    up to max_len exactly; use_cache=True and use_cache=False give the same tokens."""
    for case in CASES.cases(rng):
        with case.judged():
            model = build(gen, case)
            prompt_length, new = generation_sizes(case)
            prompt, want = decided_prompt(gen, model, case["B"], prompt_length, new)
            check_greedy(kata, model, prompt, want)


@core(zh="use_cache 时每一步只送入新 token")
def test_with_use_cache_each_step_feeds_only_the_new_token(kata, rng, gen):
    """What each forward is fed, seen where the kata runs at the model's own forward (and, if
    generate bypasses it, by a pre-hook on token_embedding): the whole prompt first, then one
    token per row at a time. When neither can be observed the check is not judged, never
    passed."""
    case = CASES.random(rng)[0]
    prompt_length, new = rng.randint(2, 4), rng.randint(3, 5)
    case = case | {"P": prompt_length, "M": prompt_length + new + rng.choice([0, 2])}
    model = build(gen, case)
    B = case["B"]
    prompt = token_ids(gen, B, prompt_length, case["V"])
    text = generate_text(model, prompt, new)

    def fed(implementation) -> dict:
        got = answer(feeding(implementation, model.recipe, prompt, new))
        if "raised" in got:
            raise AssertionError(
                pick(
                    f"{text} raised ValueError: {got['raised']}; but {prompt_length} + {new} tokens fit in "
                    f"max_len={case['M']}",
                    f"{text} 抛出了 ValueError: {got['raised']}；但是 {prompt_length} + {new} 个 token 放得进 "
                    f"max_len={case['M']}",
                )
            )
        return {"fed": got["forward"] or got["token_embedding"]}

    with case.judged(), SPEC.diagnosing(fed, case):
        shapes = fed(kata)["fed"]
        if not shapes:
            raise Inconclusive(
                pick(
                    "what generate feeds the model could not be observed: it calls neither the model's forward "
                    "nor token_embedding as a module",
                    "无法观察 generate 给模型送入了什么：它既没有调用模型的 forward，"
                    "也没有以模块方式调用 token_embedding",
                )
            )
        later = [shape for shape in shapes[1:] if math.prod(shape) != B]
        if shapes[0] != [B, prompt_length] or later:
            raise Mismatch(
                pick(
                    f"{text} fed the model {shapes[:6]}{' ...' if len(shapes) > 6 else ''}; with use_cache=True "
                    f"the first forward takes the whole prompt [{B}, {prompt_length}], then each step only the newest "
                    "token [B, 1] with the cache the previous call returned",
                    f"{text} 给模型送入的是 {shapes[:6]}{' ...' if len(shapes) > 6 else ''}；use_cache=True 时，"
                    f"第一次 forward 接收整个 prompt [{B}, {prompt_length}]，之后每一步只送入最新的 token [B, 1]，"
                    "并带上上一次调用返回的缓存",
                ),
                what="fed",
                actual=shapes,
                expected=[[B, prompt_length]] + [[B, 1]] * (new - 1),
            )


def sampling_model(gen, rng):
    """A model of a random draw, with a batch of 4, max_len room for 8 new tokens after a
    prompt of 3, and a vocabulary of at least 12: (model, prompt, new tokens)."""
    case = CASES.random(rng)[1]
    case = case | {"B": 4, "T": 11, "P": 3, "M": 11, "V": max(case["V"], 12)}
    model = build(gen, case)
    return model, token_ids(gen, 4, 3, case["V"]), 8


@core(zh="采样的 token 不超出 top_k")
def test_sampled_tokens_stay_within_top_k(kata, rng, gen):
    """temperature 2 flattens the distribution; every drawn token must be among the top_k
    largest logits of its step (the reference's, on the sequence drawn so far; a step whose
    k-th and (k+1)-th logits lie within MARGIN is not judged)."""
    model, prompt, new = sampling_model(gen, rng)
    seed, k = rng.randrange(2**31), rng.randint(2, 3)
    runs = [{"new": new, "settings": {"temperature": 2.0, "top_k": k, "seed": seed}}]
    T0 = prompt.size(1)

    def judge(index, text, record) -> None:
        tokens = record["tokens"]
        logits = model.reference(tokens)["logits"][:, T0 - 1 : -1]  # (B, new, V): step s predicts token T0 + s
        ordered = logits.sort(dim=-1, descending=True).values
        decided = (ordered[..., k - 1] - ordered[..., k]) >= MARGIN
        rank = (logits > logits.gather(-1, tokens[:, T0:, None])).sum(-1)  # (B, new): 0 = the largest
        outside = (rank >= k) & decided
        if outside.any():
            row, step = outside.nonzero()[0].tolist()
            raise Mismatch(
                pick(
                    f"{text} drew a token outside the top {k} in {int(outside.sum())} of {outside.numel()} steps; "
                    f"first row {row}, new token {step + 1}: token {int(tokens[row, T0 + step])}, ranked "
                    f"{int(rank[row, step]) + 1} by its step's logits; keep only the top_k largest logits (the others "
                    "-inf) before the softmax",
                    f"{text} 在 {outside.numel()} 步中有 {int(outside.sum())} 步抽到了前 {k} 名之外的 token；第一处在"
                    f"第 {row} 行、第 {step + 1} 个新 token：token {int(tokens[row, T0 + step])}，按该步的 logits 排第 "
                    f"{int(rank[row, step]) + 1}；softmax 之前只保留最大的 top_k 个 logits（其余设为 -inf）",
                ),
                what="tokens",
                actual=tokens,
                expected=None,  # any tokens within the top k
            )

    with model.case.judged():
        judge_generation(kata, model, prompt, runs, judge)


@core(zh="接近 0 的温度采样出贪心的 token")
def test_a_temperature_near_zero_samples_the_greedy_tokens(kata, rng, gen):
    """temperature 1e-6 divides the logits: every step's top logit, at least MARGIN above the
    next, takes all the probability, whatever the draw."""
    model, _, new = sampling_model(gen, rng)
    prompt, want = decided_prompt(gen, model, 4, 3, new)
    runs = [{"new": new, "settings": {"temperature": 1e-6, "seed": rng.randrange(2**31)}}]

    def judge(index, text, record) -> None:
        tokens = record["tokens"]
        if not torch.equal(tokens, want):
            wrong = (tokens != want).nonzero()[0].tolist()
            raise Mismatch(
                pick(
                    f"{text} drew token {int(tokens[tuple(wrong)])} at row {wrong[0]}, position {wrong[1]}, where the "
                    f"argmax is {int(want[tuple(wrong)])} at least {MARGIN} above the rest: at temperature 1e-6 the "
                    "probabilities softmax(logits / temperature) put everything on the argmax (divide by the "
                    "temperature)",
                    f"{text} 在第 {wrong[0]} 行、位置 {wrong[1]} 抽到了 token {int(tokens[tuple(wrong)])}，而该处的 "
                    f"argmax 是 {int(want[tuple(wrong)])}，比其余的至少高 {MARGIN}：温度为 1e-6 时，概率 "
                    "softmax(logits / temperature) 全部集中在 argmax 上（要除以温度）",
                ),
                what="tokens",
                actual=tokens,
                expected=want,
            )

    with model.case.judged():
        judge_generation(kata, model, prompt, runs, judge)


@convention(GENERATOR_ONLY, zh="采样只从 generator 抽取随机数")
def test_sampling_draws_from_the_generator_only(kata, rng, gen):
    """temperature > 0: the same generator state gives the same tokens, another state others,
    and torch's global RNG is left untouched. One scenario plays the three calls (generators
    seeded s, s, s + 1); whether the first moved the global RNG is observed where the kata runs."""
    model, prompt, new = sampling_model(gen, rng)
    seed = rng.randrange(2**31)
    settings = {"temperature": 1.3, "top_k": rng.randint(4, 8)}
    runs = [{"new": new, "settings": settings | {"seed": s}} for s in (seed, seed, seed + 1)]
    texts = [run_text(model, prompt, run) for run in runs]
    M = model.case["M"]

    def check(implementation) -> dict:
        trace = generation(implementation, model, prompt, runs)
        first, again, other = (generated(trace, n, texts[n], prompt, new, M) for n in range(3))
        for n, record in enumerate((first, again, other)):
            try:
                check_tokens_form(record["tokens"], prompt, new, call=texts[n])
            except Mismatch as error:
                raise AssertionError(str(error)) from None
        if first["global rng moved"]:
            raise AssertionError(
                pick(
                    f"{texts[0]} drew from torch's global RNG (torch.get_rng_state() changed): pass "
                    "generator=generator to every random call (torch.multinomial(probs, 1, generator=generator))",
                    f"{texts[0]} 从 torch 的全局 RNG 抽取了随机数（torch.get_rng_state() 变了）：每个随机调用都要传入 "
                    "generator=generator（torch.multinomial(probs, 1, generator=generator)）",
                )
            )
        if not torch.equal(first["tokens"], again["tokens"]):
            differ = int((first["tokens"] != again["tokens"]).sum())
            raise AssertionError(
                pick(
                    f"{texts[0]} gave other tokens from a generator in the same state ({differ} of "
                    f"{first['tokens'].numel()} differ): draw every random number from `generator`",
                    f"{texts[0]} 用状态相同的 generator 却得到了不同的 token（{first['tokens'].numel()} 个中有 "
                    f"{differ} 个不同）：每个随机数都要从 `generator` 中抽取",
                )
            )
        if torch.equal(first["tokens"], other["tokens"]):
            raise AssertionError(
                pick(
                    f"{texts[0]} gave the very same tokens from a generator seeded {seed + 1}: the draws must come "
                    "from `generator` (not a generator of your own, nor a fixed seed)",
                    f"{texts[0]} 用种子为 {seed + 1} 的 generator 得到了完全相同的 token：随机数必须来自 `generator`"
                    "（不能用你自己建的 generator，也不能用固定的种子）",
                )
            )
        return {}

    with model.case.judged(), SPEC.diagnosing(check, model.case):
        check(kata)

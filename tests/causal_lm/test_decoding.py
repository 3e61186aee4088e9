"""causal_lm: decoding in pieces with the cache each call returns, each story one `forwarding`
scenario returning its trace (see common.py): every call's logits against the rows of one
full pass of the reference, the cache it returns against the reference's keys and values."""

import torch

from judge.language import pick
from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    FULL,
    SPEC,
    build,
    one_thread,  # noqa: F401 - an autouse fixture
    token_ids,
    tolerance,
)
from .judging import (
    assert_close,
    check_decoding,
    forward_text,
    play,
    prefix_then_chunks,
    prefix_then_one_at_a_time,
    step,
)


@core(zh="先解码前缀、再带缓存分块解码，与一次完整前向一致")
@dtypes(*FULL)
def test_a_prefix_then_chunks_with_the_cache_match_one_full_pass(kata, rng, gen, dtype, device):
    """A prefix, then chunks of 1 to 4 tokens, each call with the cache the previous one
    returned: positions continue after the held tokens; new token i sees the held ones and the
    new ones up to itself."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, case, dtype, device)
            ids = token_ids(gen, case["B"], case["T"], case["V"], device)
            check_decoding(kata, model, ids, prefix_then_chunks(rng, case))


@core(zh="先解码前缀、再带缓存逐个 token 解码，与一次完整前向一致")
@dtypes(*FULL)
def test_a_prefix_then_one_token_at_a_time_matches_one_full_pass(kata, rng, gen, dtype):
    """What generate does with its cache: every step's logits agree with the full pass."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, case, dtype)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_decoding(kata, model, ids, prefix_then_one_at_a_time(case))


@core(zh="同一个前缀的缓存可以服务两个续写")
def test_one_prefix_cache_serves_two_continuations(kata, rng, gen):
    """forward never changes the cache it is given: the prefix's cache, passed with one
    continuation, still decodes another (the very list the prefix's call returned, both times)."""
    for case in [CASES.edges[0], *CASES.random(rng)]:
        with case.judged():
            model = build(gen, case)
            B, T, P, V, M = case["B"], case["T"], case["P"], case["V"], case["M"]
            first = token_ids(gen, B, T, V)
            second = torch.cat([first[:, :P], token_ids(gen, B, T - P, V)], dim=1)
            branches = (
                ("first", first, pick("nothing else", "此前没有其他调用")),
                (
                    "second",
                    second,
                    pick("the same cache served another continuation", "此前同一个缓存已服务过另一个续写"),
                ),
            )
            calls = [{"ids": first[:, :P]}] + [{"ids": ids[:, P:], "cache": 0} for _, ids, _ in branches]
            texts = [forward_text(model, first[:, :P])]
            texts += [
                pick(
                    f"{forward_text(model, ids[:, P:], held=P)} with the prefix's cache, after {after},",
                    f"{forward_text(model, ids[:, P:], held=P)}（使用前缀的缓存；{after}）",
                )
                for _, ids, after in branches
            ]
            fits = [pick(f"{P} tokens fit in max_len={M}", f"{P} 个 token 放得进 max_len={M}")] + [
                pick(
                    f"{P} held + {T - P} new = {T} tokens fit in max_len={M}",
                    f"已缓存 {P} 个 + 新的 {T - P} 个 = {T} 个 token，放得进 max_len={M}",
                )
            ] * 2

            def continuations(implementation, model=model, calls=calls, texts=texts, fits=fits) -> dict:
                trace = play(implementation, model, calls)
                step(trace, 0, texts[0], fits=fits[0])
                return {
                    f"logits of the {label} continuation": step(trace, n, texts[n], fits=fits[n])["logits"]
                    for n, label in ((1, "first"), (2, "second"))
                }

            with SPEC.diagnosing(continuations, case):
                got = continuations(kata)
                for n, (label, ids, _) in enumerate(branches, start=1):
                    expected = model.reference(ids)["logits"][:, P:].detach().float()
                    what = f"logits of the {label} continuation"
                    assert_close(got[what], expected, call=texts[n], what=what, tolerance=tolerance(torch.float32))

"""kv_cache: the KVCache on its own, each story one scenario (see common.py): buffers
[B, KV, max_len, hs] allocated once, update returning every token held (views of the
buffers, written in place), `length`, an overflow refused before anything is written, reset."""

import torch

from judge.language import pick
from judge.testing.checks import check_tensor_kind, describe
from judge.testing.diagnosis import diagnosing
from judge.testing.tiers import convention, core

from .common import CASES, EXACT, SPEC, assert_close, cache_sizes, cache_text, kv_pieces, random_chunks, split
from .stories import (
    allocated,
    check_buffers_kept,
    check_length,
    check_unchanged,
    check_views,
    expect,
    judge_updates,
    overflowing,
    resetting,
    same_values,
)


def check_allocation(kata, rng, dtypes: list) -> None:
    """k and v [B, KV, max_len, hs] in the dtype asked (float32 when none is), length 0."""
    case = CASES.random(rng)[0]
    sizes = cache_sizes(case)
    B, KV, hs, M = sizes
    keyword_sets = [{} if dtype is None else {"dtype": dtype} for dtype in dtypes]
    for index, (dtype, keywords) in enumerate(zip(dtypes, keyword_sets)):
        call = cache_text(case, dtype or torch.float32)

        def made(implementation, index=index) -> dict:
            got = allocated(implementation, sizes, keyword_sets)[index]
            return {f"cache.{name}": value for name, value in got.items()}

        with case.judged(), diagnosing(SPEC.kata, made, case):
            got = made(kata)
            for what in ("cache.k", "cache.v"):
                if got[what] is None:
                    raise AssertionError(
                        pick(
                            f"{call} has no attribute `{what[6:]}`; the kata asks for buffers k and v",
                            f"{call} 没有属性 `{what[6:]}`；题目要求有缓冲区 k 和 v",
                        )
                    )
                expected = torch.empty(B, KV, M, hs, dtype=dtype or torch.float32)
                check_tensor_kind(got[what], expected, call=call, what=what)
            check_length(got["cache.length"], 0, after=call, what="cache.length")


@core(zh="KVCache 以 float32 或指定的 dtype 分配缓冲区")
def test_kv_cache_allocates_its_buffers_in_float32_or_the_dtype_asked(kata, rng):
    """k and v [B, KV, max_len, hs], float32 unless dtype says otherwise (float64 here); length 0."""
    check_allocation(kata, rng, [None, torch.float64])


@core(zh="update 从旧到新返回所有已存的 token，并记下个数")
def test_update_returns_every_token_held_oldest_first_and_counts_them(kata, rng, gen):
    """Updates of random sizes: each returns the keys and values of every token so far, oldest
    first; length counts the tokens."""
    for case in CASES.cases(rng):
        with case.judged():
            chunks = random_chunks(rng, case)
            pieces = kv_pieces(gen, case, [b - a for a, b in chunks])

            def judge(index, text, got, chunks=chunks, pieces=pieces) -> None:
                check_length(got["length"], chunks[index][1], after=text)
                for what, part in (("keys", 0), ("values", 1)):
                    expected = torch.cat([piece[part] for piece in pieces[: index + 1]], dim=2)
                    assert_close(got[what], expected, call=text, what=what, tolerance=EXACT)

            judge_updates(kata, case, pieces, judge)


@core(zh="reset 清空已存的 token")
def test_reset_forgets_the_held_tokens(kata, rng, gen):
    """After reset() the length is 0 and the next update starts again from position 0."""
    for case in CASES.random(rng, 2):
        with case.judged():
            before = kv_pieces(gen, case, split(rng, rng.randint(1, case["M"])))
            after = kv_pieces(gen, case, [rng.randint(1, case["M"])])[0]
            sizes = cache_sizes(case)

            def replay(implementation, before=before, after=after, sizes=sizes) -> dict:
                return resetting(implementation, sizes, before, after)

            name = cache_text(case)
            with diagnosing(SPEC.kata, replay, case):
                seen = replay(kata)
                check_length(seen["length after reset"], 0, after=f"{name}.reset()", what="length after reset")
                update = f"{name}.update({describe(after[0])}, {describe(after[1])})"
                call = pick(f"{update} after reset()", f"reset() 之后调用 {update}")
                expect(
                    seen,
                    "update after reset",
                    "returned normally",
                    pick(
                        f"{call} {{got}}; expected it to work: a reset cache holds no tokens",
                        f"{call} {{got}}；应能正常工作：reset 之后的缓存不含任何 token",
                    ),
                )
                assert_close(seen["keys after reset"], after[0], call=call, what="keys after reset", tolerance=EXACT)
                assert_close(
                    seen["values after reset"], after[1], call=call, what="values after reset", tolerance=EXACT
                )
                check_length(
                    seen["length after reset and update"],
                    after[0].size(2),
                    after=call,
                    what="length after reset and update",
                )


@convention(
    "float16 and bfloat16 caches work: KVCache(..., dtype=torch.float16) holds its tokens in float16.",
    zh="要求时 KVCache 以半精度分配缓冲区",
)
def test_kv_cache_allocates_its_buffers_in_half_precision_when_asked(kata, rng):
    check_allocation(kata, rng, [torch.float16, torch.bfloat16])


@convention(
    "update writes into the buffers allocated once (never a new buffer, no torch.cat) and returns views",
    zh="update 原地写入并返回缓冲区的视图",
)
def test_update_writes_in_place_and_returns_views_of_the_buffers(kata, rng, gen):
    """Read from the trace's tensors: what update returns shares the storage of cache.k and
    cache.v, and those stay the buffers KVCache(...) allocated (see common.py)."""
    for case in CASES.cases(rng):
        with case.judged():
            pieces = kv_pieces(gen, case, [b - a for a, b in random_chunks(rng, case)])

            def judge(index, text, got) -> None:
                check_views(got["views"], call=text)
                check_buffers_kept(got["buffers kept"], after=text)

            judge_updates(kata, case, pieces, judge)


@convention(
    "an update that does not fit raises ValueError before writing anything.",
    zh="放不下的 update 在写入任何内容之前抛出 ValueError",
)
def test_update_that_does_not_fit_raises_value_error_before_writing_anything(kata, rng, gen):
    """A cache holding max_len - r tokens refuses r + 1 or more (buffers and length unchanged),
    takes exactly r (full), then refuses one more."""
    for case in CASES.cases(rng):
        with case.judged():
            M = case["M"]
            room = rng.randint(1, M)
            held = M - room
            fill = kv_pieces(gen, case, split(rng, held))
            extra = room + rng.randint(1, 3)
            too_many, exact, one_more = kv_pieces(gen, case, [extra, room, 1])
            sizes = cache_sizes(case)

            def replay(implementation, fill=fill, too_many=too_many, exact=exact, one_more=one_more, sizes=sizes):
                seen = overflowing(implementation, sizes, fill, too_many, exact, one_more)
                for refused in ("refusing", "refusing one more"):
                    before, after = seen.pop(f"before {refused}"), seen.pop(f"after {refused}")
                    seen[f"nothing written when {refused}"] = all(map(same_values, before, after))
                return seen

            name = cache_text(case)
            with diagnosing(SPEC.kata, replay, case):
                seen = replay(kata)
                update = pick(
                    f"{name}.update(k_new, v_new) of {extra} tokens with {held} held",
                    f"已存 {held} 个 token 时用 {extra} 个 token 调用 {name}.update(k_new, v_new)",
                )
                expect(
                    seen,
                    "too many",
                    "raised ValueError",
                    pick(
                        f"{update} {{got}}; expected ValueError: {held} + {extra} > max_len={M}",
                        f"{update} {{got}}；应抛出 ValueError：{held} + {extra} > max_len={M}",
                    ),
                )
                expect(
                    seen,
                    "length after refusing",
                    held,
                    pick(
                        f"after {update} was refused, cache.length is {{got!r}}; expected {held}: "
                        "refuse before changing anything",
                        f"{update} 被拒绝之后，cache.length 是 {{got!r}}；应为 {held}：要在改动任何东西之前拒绝",
                    ),
                )
                expect(
                    seen,
                    "nothing written when refusing",
                    True,
                    pick(
                        f"{update} was refused but changed the buffers: check that the tokens fit BEFORE writing "
                        "any of them",
                        f"{update} 被拒绝了，却改动了缓冲区：要先检查这些 token 放得下，再写入其中任何一个",
                    ),
                )
                fill_up = pick(
                    f"{name}.update(k_new, v_new) of {room} tokens with {held} held",
                    f"已存 {held} 个 token 时用 {room} 个 token 调用 {name}.update(k_new, v_new)",
                )
                expect(
                    seen,
                    "filling exactly",
                    "returned normally",
                    pick(
                        f"{fill_up} {{got}}; expected it to work: {held} + {room} = max_len={M} fits exactly",
                        f"{fill_up} {{got}}；应能正常工作：{held} + {room} = max_len={M}，恰好放满",
                    ),
                )
                expect(
                    seen,
                    "length when full",
                    M,
                    pick(
                        f"after {fill_up}, cache.length is {{got!r}}; expected {M}",
                        f"{fill_up} 之后，cache.length 是 {{got!r}}；应为 {M}",
                    ),
                )
                full = pick(
                    f"{name}.update(k_new, v_new) of 1 token with {M} held (full)",
                    f"已存 {M} 个 token（已满）时用 1 个 token 调用 {name}.update(k_new, v_new)",
                )
                expect(
                    seen,
                    "one more",
                    "raised ValueError",
                    pick(
                        f"{full} {{got}}; expected ValueError: the cache is full",
                        f"{full} {{got}}；应抛出 ValueError：缓存已满",
                    ),
                )
                expect(
                    seen,
                    "length after refusing one more",
                    M,
                    pick(
                        f"after {full} was refused, cache.length is {{got!r}}; expected {M}",
                        f"{full} 被拒绝之后，cache.length 是 {{got!r}}；应为 {M}",
                    ),
                )
                expect(
                    seen,
                    "nothing written when refusing one more",
                    True,
                    pick(
                        f"{full} was refused but changed the buffers: check that the tokens fit BEFORE writing any of them",
                        f"{full} 被拒绝了，却改动了缓冲区：要先检查这些 token 放得下，再写入其中任何一个",
                    ),
                )


@convention("k_new and v_new are never changed in place.", zh="update 不改动 k_new 和 v_new")
def test_update_leaves_k_new_and_v_new_alone(kata, rng, gen):
    """Checked by value, on the arguments as each update left them."""
    case = CASES.random(rng)[0]
    with case.judged():
        pieces = kv_pieces(gen, case, [b - a for a, b in random_chunks(rng, case)])

        def judge(index, text, got) -> None:
            check_unchanged(pieces[index][0], got["k_new"], call=text, what="k_new")
            check_unchanged(pieces[index][1], got["v_new"], call=text, what="v_new")

        judge_updates(kata, case, pieces, judge)

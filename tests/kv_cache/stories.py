"""kv_cache: its stories, each ONE scenario, and their checks.

A KVCache is stateful, so each story (the updates of a cache, an overflow, a reset, a
decoding) is one scenario: it runs the whole story where the kata lives and returns its
trace, every call's result and what the cache holds after it; the tests compare it step by
step, each step inside a diagnosis that replays the same story on a known slip and takes
the same step of its trace. Whether update returns views of the buffers and whether the
buffers stay the ones allocated first is read from the trace's tensors: tensors returned
together that share storage in the kata process share it here too (judge.remote.wire), and
the trace keeps every buffer alive, so a new buffer never takes an old one's address.
"""

from __future__ import annotations

import random

import torch

from judge.language import pick, tr
from judge.testing import modules
from judge.testing.checks import Mismatch, check_tensor_kind, describe, judge_on_device
from judge.testing.diagnosis import diagnosing
from judge.testing.scenarios import outcome, scenario

from .common import (
    CASES,
    KVC,
    SPEC,
    TOLERANCES,
    Model,
    assert_close,
    build,
    cache_sizes,
    cache_text,
    random_chunks,
    schedule_text,
    sequence,
)

# --------------------------------------------------------------------------- scenarios (run where the kata lives)


@scenario
def allocated(kata, sizes: tuple, keyword_sets: list) -> list:
    """A new KVCache(*sizes, **keywords) for each keyword set: its k, v and length."""
    found = []
    for keywords in keyword_sets:
        cache = kata.KVCache(*sizes, **keywords)
        found.append({name: getattr(cache, name, None) for name in ("k", "v", "length")})
    return found


@scenario
def updating(kata, sizes: tuple, pieces: list) -> dict:
    """A new KVCache(*sizes) fed `pieces`, one update each. The trace: the buffers as allocated,
    then after each update its length, what update returned (the tensors themselves, and
    their contents then), the buffers and the arguments as the call left them; it stops at a
    ValueError (the step says "raised")."""
    cache = kata.KVCache(*sizes)
    trace = {"buffers": (cache.k, cache.v), "updates": []}
    for k_new, v_new in pieces:
        try:
            result = cache.update(k_new, v_new)
        except ValueError as error:
            trace["updates"].append({"raised": str(error)})
            break
        step = {"length": cache.length, "buffers": (cache.k, cache.v), "k_new": k_new, "v_new": v_new}
        if isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result):
            step |= {"keys": result[0].clone(), "values": result[1].clone(), "returned": tuple(result)}
        else:
            step["returned"] = result
        trace["updates"].append(step)
    return trace



@scenario
def overflowing(kata, sizes: tuple, fill: list, too_many: tuple, exact: tuple, one_more: tuple) -> dict:
    """A cache filled by `fill` to max_len - r tokens, then: `too_many` (r + 1 or more tokens,
    refused), `exact` (r tokens: fills it exactly), `one_more` (refused). What each did, the
    length after it, and the buffers' contents before and after each refusal."""
    cache = kata.KVCache(*sizes)
    for k_new, v_new in fill:
        cache.update(k_new, v_new)
    seen = {"before refusing": (cache.k.clone(), cache.v.clone())}
    seen["too many"] = outcome(lambda: cache.update(*too_many))
    seen["length after refusing"] = cache.length
    seen["after refusing"] = (cache.k.clone(), cache.v.clone())
    seen["filling exactly"] = outcome(lambda: cache.update(*exact))
    seen["length when full"] = cache.length
    seen["before refusing one more"] = (cache.k.clone(), cache.v.clone())
    seen["one more"] = outcome(lambda: cache.update(*one_more))
    seen["length after refusing one more"] = cache.length
    seen["after refusing one more"] = (cache.k.clone(), cache.v.clone())
    return seen


@scenario
def resetting(kata, sizes: tuple, before: list, after: tuple) -> dict:
    """Updates, reset(), then one more update: it starts again from position 0."""
    cache = kata.KVCache(*sizes)
    for k_new, v_new in before:
        cache.update(k_new, v_new)
    cache.reset()
    seen = {"length after reset": cache.length}
    try:
        keys, values = cache.update(*after)
    except ValueError as error:
        return seen | {"update after reset": f"raised ValueError: {error}"}
    seen["update after reset"] = "returned normally"
    seen |= {"keys after reset": keys, "values after reset": values, "length after reset and update": cache.length}
    return seen


@scenario
def decoding(kata, recipe: dict, sizes: tuple, keywords: dict, sequences: list, schedules: list) -> dict:
    """The learner's CachedSelfAttention (built from the recipe) and one KVCache(*sizes,
    **keywords) decode each sequence by its schedule of chunks (first token, end), the cache
    reset between sequences. The trace: the buffers as allocated, then for each call its
    output, the cache's length, what the buffers hold at the positions filled so far (the
    rotated keys and the values), the buffers themselves and the chunk as the call left it;
    it stops at a ValueError (the step says "raised")."""
    module, problem = modules.made(kata, recipe)
    if problem:
        return problem
    cache = kata.KVCache(*sizes, **keywords)
    trace = {"buffers": (cache.k, cache.v), "sequences": []}
    for number, (x, chunks) in enumerate(zip(sequences, schedules)):
        if number:
            cache.reset()
        calls = []
        trace["sequences"].append(calls)
        for a, b in chunks:
            piece = x[:, a:b].clone()
            try:
                output = module(piece, cache)
            except ValueError as error:
                calls.append({"raised": str(error)})
                return trace
            calls.append(
                {
                    "output": output,
                    "length": cache.length,
                    "rotated keys": cache.k[:, :, :b].clone(),
                    "values": cache.v[:, :, :b].clone(),
                    "buffers": (cache.k, cache.v),
                    "x": piece,
                }
            )
    return trace


# --------------------------------------------------------------------------- the judging process's side


def same_storage(a, b) -> bool:
    """Whether two tensors of a trace share their storage (views of one buffer)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


def said(found):
    """An outcome sentence (see `outcome`) as the learner reads it; anything else as it is."""
    if found == "returned normally":
        return pick(found, "正常返回了")
    if isinstance(found, str) and found.startswith("raised "):
        return pick(found, "抛出了 " + found.removeprefix("raised "))
    return found


def expect(seen: dict, what: str, expected, message: str) -> None:
    if seen[what] != expected:
        raise Mismatch(message.format(got=said(seen[what])), what=what, actual=seen[what], expected=expected)


def check_length(length, expected: int, *, after: str, what: str = "length") -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length != expected:
        raise Mismatch(
            pick(
                f"after {after}, cache.length is {describe(length)}; expected the int {expected} (the tokens held)",
                f"{after} 之后，cache.length 是 {describe(length)}；应为 int {expected}（缓存中的 token 数）",
            ),
            what=what,
            actual=length,
            expected=expected,
        )


def check_buffers_kept(kept, *, after: str) -> None:
    if kept is False:
        raise Mismatch(
            pick(
                f"after {after}, cache.k or cache.v is no longer the buffer allocated by KVCache(...): its storage "
                "moved. Allocate the buffers once and write into them in place (self.k[:, :, start:end] = k_new), "
                "never torch.cat into a new tensor",
                f"{after} 之后，cache.k 或 cache.v 不再是 KVCache(...) 分配的那块缓冲区：它的存储换了。"
                "缓冲区只分配一次，之后原地写入（self.k[:, :, start:end] = k_new），绝不要用 torch.cat 拼成新张量",
            ),
            what="buffers kept",
            actual=False,
            expected=True,
        )


def check_views(views, *, call: str) -> None:
    if views is False:
        raise Mismatch(
            pick(
                f"{call} returned keys or values that do not share the storage of cache.k and cache.v: "
                "return views of the buffers (self.k[:, :, :length]), not copies",
                f"{call} 返回的 keys 或 values 与 cache.k、cache.v 不共享存储："
                "请返回缓冲区的视图（self.k[:, :, :length]），而不是副本",
            ),
            what="views",
            actual=False,
            expected=True,
        )


def check_unchanged(sent: torch.Tensor, came, *, call: str, what: str) -> None:
    """A convention: the call left its argument as it was sent (by value)."""
    if not sent.is_meta and not same_values(sent, came):
        raise Mismatch(
            tr(
                "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op",
                call=call,
                name=what,
            ),
            what=what,
            actual=came,
            expected=sent,
        )


def same_values(before: torch.Tensor, after) -> bool:
    """Bit for bit (NaN included: the buffers' first contents may be anything)."""
    return (
        isinstance(after, torch.Tensor)
        and after.shape == before.shape
        and after.dtype == before.dtype
        and torch.allclose(after.cpu(), before.cpu(), rtol=0.0, atol=0.0, equal_nan=True)
    )


# --- the updates of a KVCache on its own


def step_at(steps: list, index: int) -> tuple[str, dict]:
    """Step `index` of a story's steps; one that failed (a ValueError where the tokens fit, a
    result of the wrong form) raises its failure here, for the learner and a replay alike."""
    text, observed = steps[index]
    if "failure" in observed:
        raise AssertionError(observed["failure"])
    return text, observed


def update_steps(trace: dict, case, pieces: list) -> list[tuple[str, dict]]:
    """The trace of `updating` as (call text, observations) per update: its length, the keys and
    values it returned, whether they are views of the buffers, whether the buffers are still the
    ones first allocated, and the arguments as the call left them; {"failure": why} for an
    update that raised ValueError (the tokens fit) or did not return a pair of tensors."""
    steps, held = [], 0
    for (k_new, v_new), step in zip(pieces, trace["updates"]):
        T = k_new.size(2)
        update = f"{cache_text(case)}.update({describe(k_new)}, {describe(v_new)})"
        text = pick(f"{update} with {held} tokens held", f"已存 {held} 个 token 时调用 {update}")
        if "raised" in step:
            why = pick(
                f"{text} raised ValueError: {step['raised']}; but {held} + {T} = {held + T} tokens fit in "
                f"max_len={case['M']} (a cache may be filled exactly to max_len)",
                f"{text} 抛出了 ValueError: {step['raised']}；但 {held} + {T} = {held + T} 个 token 放得进 "
                f"max_len={case['M']}（缓存可以恰好填满到 max_len）",
            )
            return [*steps, (text, {"failure": why})]
        if "keys" not in step:
            why = pick(
                f"{text} returned {describe(step['returned'])}; expected a pair (keys, values)",
                f"{text} 返回了 {describe(step['returned'])}；应返回一对 (keys, values)",
            )
            return [*steps, (text, {"failure": why})]
        held += T
        first = trace["buffers"]
        views = all(same_storage(t, b) for t, b in zip(step["returned"], step["buffers"]))
        kept = all(same_storage(b, f) for b, f in zip(step["buffers"], first))
        observed = {"length": step["length"], "keys": step["keys"], "values": step["values"]}
        observed |= {"views": views, "buffers kept": kept, "k_new": step["k_new"], "v_new": step["v_new"]}
        steps.append((text, observed))
    return steps


def judge_updates(kata, case, pieces: list, judge) -> None:
    """The updates of a new KVCache, one check per update: judge(index, text, observations),
    inside a diagnosis that replays the same story on each known slip (on copies of the
    pieces taken now) and takes the same update of its trace."""
    originals = [tuple(t.clone() for t in piece) for piece in pieces]
    sizes = cache_sizes(case)

    def replay(index: int):
        def replayed(implementation) -> dict:
            return step_at(update_steps(updating(implementation, sizes, originals), case, originals), index)[1]

        return replayed

    steps = None
    for index in range(len(originals)):
        with diagnosing(SPEC.kata, replay(index), case):
            if steps is None:
                steps = update_steps(updating(kata, sizes, originals), case, originals)
            text, observed = step_at(steps, index)
            judge(index, text, observed)


# --- decoding with the module


def decode(implementation, model: Model, sequences: list, schedules: list) -> dict:
    """The `decoding` story with `implementation`, its parameters checked against the recipe."""
    sizes = cache_sizes(model.case)
    got = decoding(implementation, model.built.recipe, sizes, model.cache_keywords, sequences, schedules)
    return modules.built_module(KVC, model.built, got)


def decoding_steps(trace: dict, model: Model, sequences: list, schedules: list) -> list[tuple[str, dict]]:
    """The trace of `decoding` as (call text, observations) per call: its output, the cache's
    length, the rotated keys and the values the cache holds, whether its buffers are still the
    ones first allocated (None on "meta", which has no storage) and the chunk as the call left
    it; {"failure": why} for a call that raised ValueError (the tokens fit)."""
    steps = []
    meta = model.device == "meta"
    for number, (x, chunks, calls) in enumerate(zip(sequences, schedules, trace["sequences"])):
        again = pick("after cache.reset(), ", "cache.reset() 之后，") if number else ""
        cache, schedule = model.cache_repr(), schedule_text(chunks)
        story = pick(
            f"{again}decoding {schedule} with cache = {cache}", f"{again}用 cache = {cache} 解码（{schedule}）"
        )
        for step, ((a, b), call) in enumerate(zip(chunks, calls)):
            piece = f"{model.name}({describe(x[:, a:b])}, cache)"
            text = pick(
                f"{story}: call {step + 1}, tokens {a}..{b - 1} ({a} held): {piece}",
                f"{story}：第 {step + 1} 次调用，token {a}..{b - 1}（已存 {a} 个）：{piece}",
            )
            if "raised" in call:
                why = pick(
                    f"{text} raised ValueError: {call['raised']}; but {a} held + {b - a} new = {b} tokens fit in "
                    f"max_len={model.case['M']} (a cache may be filled exactly to max_len)",
                    f"{text} 抛出了 ValueError: {call['raised']}；但已存 {a} 个 + 新来 {b - a} 个 = {b} 个 token "
                    f"放得进 max_len={model.case['M']}（缓存可以恰好填满到 max_len）",
                )
                return [*steps, (text, {"failure": why})]
            kept = None if meta else all(same_storage(b_, f) for b_, f in zip(call["buffers"], trace["buffers"]))
            observed = {name: call[name] for name in ("output", "length", "rotated keys", "values", "x")}
            steps.append((text, observed | {"buffers kept": kept}))
    return steps


def check_decoding(
    kata,
    model: Model,
    sequences: list,
    schedules: list,
    *,
    contents: bool = False,
    float64_throughout: bool = False,
) -> None:
    """Each call's output against the reference's rows for its tokens (one causal pass over the
    whole sequence) and the cache's length after it; with `contents`, the rotated keys and the
    values the cache holds after it. Float64 results with float32's tolerance unless
    float64_throughout (see spec.FLOAT64_RULE)."""
    tolerance = SPEC.tolerance(model.dtype, float64_throughout=float64_throughout)
    wants = [model.built.reference(x) for x in sequences]

    def judge(index, text, got, a, b, want) -> None:
        expected = want["output"][:, a:b].to(dtype=model.dtype, device=model.device)
        call = pick(
            f"{text}, compared with rows {a}..{b - 1} of one causal pass over the whole sequence,",
            f"{text}（与对整个序列做一次因果计算所得的第 {a}..{b - 1} 行比较）",
        )
        assert_close(got["output"], expected, call=call, what="output", tolerance=tolerance)
        check_length(got["length"], b, after=text)
        if contents:
            for what, key, name in (("rotated keys", "keys", "k"), ("values", "values", "v")):
                expected = want[key][:, :, :b].to(dtype=model.dtype, device=model.device)
                call = pick(f"after {text}, cache.{name}[:, :, :{b}]", f"{text} 之后的 cache.{name}[:, :, :{b}]")
                assert_close(got[what], expected, call=call, what=what, tolerance=tolerance)

    judge_decoding(kata, model, sequences, schedules, judge, wants)


def judge_decoding(kata, model: Model, sequences: list, schedules: list, judge, wants=None) -> None:
    """The decoding story, one check per call: judge(index, text, observations, a, b, want)
    (want: the reference's pass over that call's sequence, or None), inside a diagnosis that
    replays the same story on each known slip (its own module with the same weights, its own
    KVCache, on copies of the sequences taken now) and takes the same call of its trace."""
    originals = [x.clone() for x in sequences]
    wants = wants or [None] * len(sequences)

    def replay(index: int):
        def replayed(implementation) -> dict:
            steps = decoding_steps(decode(implementation, model, originals, schedules), model, originals, schedules)
            return step_at(steps, index)[1] if index < len(steps) else {}

        return replayed

    chunks = [(a, b, want) for want, schedule in zip(wants, schedules) for a, b in schedule]
    steps = None
    for index, (a, b, want) in enumerate(chunks):
        with diagnosing(SPEC.kata, replay(index), model.case):
            if steps is None:
                steps = decoding_steps(decode(kata, model, originals, schedules), model, originals, schedules)
            text, got = step_at(steps, index)
            judge(index, text, got, a, b, want)


def judge_decoding_on_device(kata, device: str) -> None:
    """Results follow the inputs' device: first the buffers KVCache(device=...) allocates (their
    kind: a new buffer's contents may be anything), then a decoding story (the first edge case,
    fixed draws) on `device`, every call's output judged by checks.judge_on_device (on "meta",
    only its kind)."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    sizes = cache_sizes(case)
    call = cache_text(case, device=device)

    def buffers(implementation) -> dict:
        got = allocated(implementation, sizes, [{"device": device}])[0]
        return {"cache.k": got["k"], "cache.v": got["v"]}

    B, KV, hs, M = sizes
    with diagnosing(SPEC.kata, buffers, case):
        got = buffers(kata)
        for what in ("cache.k", "cache.v"):
            check_tensor_kind(got[what], torch.empty(B, KV, M, hs, device=device), call=call, what=what)

    def story(where: str):
        gen, rng = torch.Generator().manual_seed(0), random.Random(0)
        model = build(gen, rng, case, device=where)
        return model, [sequence(gen, case, torch.float32, where)], [random_chunks(rng, case)]

    def flat(trace: dict, model, sequences, schedules) -> dict:
        steps = decoding_steps(trace, model, sequences, schedules)
        return {f"output of call {n + 1}": step_at(steps, n)[1]["output"] for n in range(len(steps))}

    def expected(where: str) -> dict:
        model, sequences, schedules = story(where)
        want = model.built.reference(sequences[0])["output"].to(dtype=torch.float32, device=where)
        return {f"output of call {n + 1}": want[:, a:b] for n, (a, b) in enumerate(schedules[0])}

    def run(where: str, check) -> None:
        model, sequences, schedules = story(where)
        cache, schedule = model.cache_repr(), schedule_text(schedules[0])
        text = pick(
            f"decoding {schedule} with cache = {cache} and {model.name}",
            f"用 cache = {cache} 和 {model.name} 解码（{schedule}）",
        )

        def replay(implementation) -> dict:
            return flat(decode(implementation, model, sequences, schedules), model, sequences, schedules)

        with diagnosing(SPEC.kata, replay, case):
            check(text, replay(kata))

    def compare(got, want, *, call: str, what: str) -> None:
        assert_close(got, want, call=call, what=what, tolerance=TOLERANCES[want.dtype])

    judge_on_device(run, device, expected=expected, compare=compare)

"""causal_lm: the judging process's side of its tests: the forward, decoding and generation
stories of common.py's scenarios read step by step, and the checks of each step (each inside
a diagnosis that replays the same story on a known slip and takes the same step)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from judge.language import pick
from judge.testing import checks
from judge.testing.checks import Mismatch, check_tensor_kind, describe
from judge.testing.functions import tuple_of
from judge.testing.spec import core_dtype

from .common import (
    GRADIENTS,
    GRADIENTS_CORE,
    MARGIN,
    OWN_LOSS,
    SPEC,
    Model,
    Reference,
    answer,
    differentiated,
    forwarding,
    generating,
    token_ids,
    tolerance,
)

# --------------------------------------------------------------------------- forward, judged


def forward_text(model: Model, ids, *, targets=None, held: int | None = None) -> str:
    parts = [describe(ids)]
    if targets is not None:
        parts.append(f"targets={describe(targets)}")
    if held is not None:
        parts.append(pick(f"cache=<the cache of {held} tokens>", f"cache=<{held} 个 token 的缓存>"))
    return f"{model.name}({', '.join(parts)})"


def play(implementation, model: Model, calls: list) -> list[dict]:
    """The `forwarding` story with `implementation`: the trace of its calls."""
    return answer(forwarding(implementation, model.recipe, calls))["calls"]


def cache_form(cache) -> str:
    """How a cache looks, e.g. '2 pairs (k, v): (float32[2, 2, 5, 5], float32[2, 2, 5, 5]) ...'."""
    if not isinstance(cache, (list, tuple)):
        return describe(cache)
    pairs = []
    for pair in cache:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(t, torch.Tensor) for t in pair)):
            return pick(
                f"a {type(cache).__name__} of {len(cache)} items, one of them {describe(pair)}",
                f"一个含 {len(cache)} 项的 {type(cache).__name__}，其中一项是 {describe(pair)}",
            )
        pairs.append(f"({describe(pair[0])}, {describe(pair[1])})")
    return pick(
        f"{len(cache)} pair{'s' * (len(cache) != 1)} (k, v): {', '.join(pairs)}",
        f"{len(cache)} 对 (k, v)：{', '.join(pairs)}",
    )


def expected_form(model: Model, B: int, S: int) -> str:
    c = model.case
    shape = torch.empty(B, c["H"], S, c["E"] // c["H"], dtype=model.dtype, device=model.device)
    return cache_form([(shape, shape)] * c["layers"])


def observe(result) -> dict:
    """What a forward returned, as the checks compare it: the logits, the loss, the cache's form
    and, per block, its keys and values."""
    logits, loss, cache = result
    seen = {"logits": logits, "loss": loss, "cache form": cache_form(cache)}
    if isinstance(cache, (list, tuple)):
        for index, pair in enumerate(cache):
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                seen[f"keys of block {index}"], seen[f"values of block {index}"] = pair
    return seen


def step(trace: list, index: int, text: str, *, fits: str) -> dict:
    """Call `index` of a `forwarding` trace as the checks compare it; a call that raised
    ValueError where the tokens fit, or returned no triple, fails here (for the learner and a
    replay alike). {} for a call the story never reached."""
    if index >= len(trace):
        return {}
    record = trace[index]
    if "raised" in record:
        raise AssertionError(
            pick(
                f"{text} raised ValueError: {record['raised']}; but {fits}",
                f"{text} 抛出了 ValueError: {record['raised']}；但是 {fits}",
            )
        )
    result = record["result"]
    tuple_of("logits", "loss", "cache")(result, text)  # a triple, or it says so
    return observe(result)


def assert_close(actual, expected, *, call: str, what: str, tolerance: dict) -> None:
    """checks.assert_close, with a quick pass for a result that is plainly close."""
    check_tensor_kind(actual, expected, call=call, what=what)
    if not expected.is_meta and torch.allclose(actual, expected, rtol=tolerance["rtol"], atol=tolerance["atol"]):
        return
    checks.assert_close(actual, expected, call=call, what=what, tolerance=tolerance)


def check_cache(model: Model, seen: dict, want: dict, B: int, S: int, *, call: str, throughout=False) -> None:
    """The cache returned after S tokens: its form, then each block's keys and values."""
    form = expected_form(model, B, S)
    if seen["cache form"] != form:
        raise Mismatch(
            pick(
                f"{call} returned a cache of {seen['cache form']}; expected a list with one pair (k, v) per block, "
                f"each [B, H, tokens so far, hs]: {form}",
                f"{call} 返回的缓存是 {seen['cache form']}；应为一个列表，每个块一对 (k, v)，"
                f"形状都是 [B, H, 到目前为止的 token 数, hs]：{form}",
            ),
            what="cache form",
            actual=seen["cache form"],
            expected=form,
        )
    for index in range(model.case["layers"]):
        for what, key in ((f"keys of block {index}", "keys"), (f"values of block {index}", "values")):
            expected = want[key][index][:, :, :S].to(dtype=model.dtype, device=model.device)
            assert_close(
                seen[what],
                expected,
                call=pick(f"{call}, in the cache", f"{call}（缓存中）"),
                what=what,
                tolerance=tolerance(model.dtype, throughout),
            )


def own_cross_entropy(logits, targets) -> torch.Tensor | None:
    """F.cross_entropy of the learner's logits in float64, rounded to their dtype."""
    if not isinstance(logits, torch.Tensor) or logits.is_meta or logits.dim() != 3:
        return None
    flat = logits.detach().cpu().double().reshape(-1, logits.size(-1))
    return F.cross_entropy(flat, targets.cpu().reshape(-1), ignore_index=-100).to(logits.dtype)


def check_loss(model: Model, seen: dict, want: dict, targets, *, call: str, throughout=False) -> None:
    """None without targets; with them a 0-d tensor of the logits' dtype, equal to F.cross_entropy
    of the learner's own logits (ignore_index=-100, no shift) and to the reference's."""
    got = seen["loss"]
    if targets is None:
        if got is not None:
            raise Mismatch(
                pick(
                    f"{call} returned loss {describe(got)}; expected None without targets",
                    f"{call} 返回的 loss 是 {describe(got)}；没有 targets 时应为 None",
                ),
                what="loss",
                actual=got,
                expected=None,
            )
        return
    if got is None:
        raise Mismatch(
            pick(
                f"{call} returned loss None; with targets it returns the mean cross-entropy",
                f"{call} 返回的 loss 是 None；给了 targets 时应返回平均交叉熵",
            ),
            what="loss",
            actual=got,
            expected=None,
        )
    V = model.case["V"]
    expected = F.cross_entropy(want["logits"].reshape(-1, V), targets.cpu().reshape(-1), ignore_index=-100)
    expected = expected.detach().to(dtype=model.dtype, device=model.device)
    check_tensor_kind(got, expected, call=call, what="loss")
    own = own_cross_entropy(seen["logits"], targets)
    if own is not None:
        assert_close(
            got,
            own.to(model.device),
            call=pick(
                f"{call}, compared with F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), "
                "ignore_index=-100) of the logits it returned,",
                f"{call}（与对它返回的 logits 求 F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), "
                "ignore_index=-100) 的结果比较）",
            ),
            what="loss",
            tolerance=OWN_LOSS[core_dtype(model.dtype, throughout)],
        )
    assert_close(got, expected, call=call, what="loss", tolerance=tolerance(model.dtype, throughout))


def check_logits(model: Model, seen: dict, want: dict, a: int, b: int, *, call: str, throughout=False) -> None:
    """The logits of tokens a..b-1 against the reference's rows."""
    expected = want["logits"][:, a:b].detach().to(dtype=model.dtype, device=model.device)
    assert_close(seen["logits"], expected, call=call, what="logits", tolerance=tolerance(model.dtype, throughout))


def check_full_pass(kata, model: Model, ids, targets=None, *, float64_throughout: bool = False) -> None:
    """logits, loss (or None) and the cache of one call without a cache."""
    B, T = ids.shape
    text = forward_text(model, ids, targets=targets)
    calls = [{"ids": ids, "targets": targets}]
    fits = pick(f"{T} tokens fit in max_len={model.case['M']}", f"{T} 个 token 放得进 max_len={model.case['M']}")
    want = model.reference(ids)

    def replay(implementation) -> dict:
        return step(play(implementation, model, calls), 0, text, fits=fits)

    with SPEC.diagnosing(replay, model.case):
        seen = replay(kata)
        check_logits(model, seen, want, 0, T, call=text, throughout=float64_throughout)
        check_loss(model, seen, want, targets, call=text, throughout=float64_throughout)
        check_cache(model, seen, want, B, T, call=text, throughout=float64_throughout)


def check_gradients(kata, model: Model, ids, targets, *, float64_throughout: bool = False) -> None:
    """The gradient of the loss for every parameter of a float64 model (the tied weight gets both
    its uses) against autograd through the reference: within GRADIENTS_CORE in the core tier
    (a float32 step is right there), GRADIENTS when float64_throughout."""
    model.reference.zero_grad()
    model.reference.loss(ids, targets).backward()
    wanted = {n: p.grad for n, p in model.reference.named_parameters()}
    text = forward_text(model, ids, targets=targets) + ".backward()"
    allowed = GRADIENTS if float64_throughout else GRADIENTS_CORE

    def gradients(implementation) -> dict:
        got = answer(differentiated(implementation, model.recipe, ids, targets))
        if not got["requires_grad"]:
            raise AssertionError(
                pick(
                    f"{text}: the loss {describe(got['loss'])} does not require grad; it must be computed from the "
                    "logits with torch operations (no .item(), no .detach(), no torch.no_grad())",
                    f"{text}：loss {describe(got['loss'])} 不需要梯度（requires_grad 为 False）；它必须由 logits "
                    "经 torch 运算算出（不要用 .item()、.detach() 或 torch.no_grad()）",
                )
            )
        return {f"gradient of {name}": grad for name, grad in got["grads"].items()}

    with SPEC.diagnosing(gradients, model.case):
        got = gradients(kata)
        for name, expected in wanted.items():
            what = f"gradient of {name}"
            if got.get(what) is None:
                raise Mismatch(
                    pick(
                        f"after {text}, {name}.grad is None: the loss does not depend on it (detached, or not used)",
                        f"执行 {text} 之后，{name}.grad 是 None：loss 不依赖于它（被 detach 了，或者没有用到）",
                    ),
                    what=what,
                    actual=None,
                    expected=expected,
                )
            assert_close(got[what], expected, call=text, what=what, tolerance=allowed)


# --------------------------------------------------------------------------- decoding in pieces


def prefix_then_one_at_a_time(case) -> list[tuple[int, int]]:
    P, T = case["P"], case["T"]
    return [(0, P)] + [(t, t + 1) for t in range(P, T)]


def prefix_then_chunks(rng, case) -> list[tuple[int, int]]:
    """The prefix, then chunks of 1 to 4 tokens, the first of at least 2 where they fit
    (several new tokens after held ones: the causal mask aligned bottom-right)."""
    P, T = case["P"], case["T"]
    chunks, start = [(0, P)], P
    while start < T:
        end = min(T, start + rng.randint(2 if start == P else 1, 4))
        chunks.append((start, end))
        start = end
    return chunks


def decoding_calls(model: Model, ids, chunks) -> tuple[list, list, list]:
    """(the `forwarding` calls, each with the cache the previous one returned; their texts;
    what fits, for messages)."""
    sizes = ", ".join(str(b - a) for a, b in chunks)
    story = pick(f"decoding [{sizes}] tokens per call", f"分段解码（每次调用 [{sizes}] 个 token）")
    calls, texts, fits = [], [], []
    for number, (a, b) in enumerate(chunks):
        calls.append({"ids": ids[:, a:b].clone(), "cache": number - 1 if number else None})
        call = forward_text(model, ids[:, a:b], held=a if number else None)
        texts.append(
            pick(
                f"{story}: call {number + 1}, tokens {a}..{b - 1}: {call}",
                f"{story}：第 {number + 1} 次调用，token {a}..{b - 1}：{call}",
            )
        )
        fits.append(
            pick(
                f"{a} held + {b - a} new = {b} tokens fit in max_len={model.case['M']}",
                f"已缓存 {a} 个 + 新的 {b - a} 个 = {b} 个 token，放得进 max_len={model.case['M']}",
            )
        )
    return calls, texts, fits


def check_decoding(kata, model: Model, ids, chunks, *, float64_throughout: bool = False) -> None:
    """Each call's logits against the reference's rows for its tokens (one causal pass over the
    whole sequence), and the cache it returns against the reference's keys and values; each
    call inside a diagnosis that replays the story on a known slip and takes the same call."""
    B = ids.size(0)
    want = model.reference(ids)
    calls, texts, fits = decoding_calls(model, ids, chunks)

    def replay(index: int):
        return lambda implementation: step(play(implementation, model, calls), index, texts[index], fits=fits[index])

    trace = None
    for index, (a, b) in enumerate(chunks):
        with SPEC.diagnosing(replay(index), model.case):
            if trace is None:
                trace = play(kata, model, calls)
            seen = step(trace, index, texts[index], fits=fits[index])
            call = pick(
                f"{texts[index]}, compared with rows {a}..{b - 1} of one causal pass over the whole sequence,",
                f"{texts[index]}（与对整个序列做一次因果前向所得的第 {a}..{b - 1} 行比较）",
            )
            check_logits(model, seen, want, a, b, call=call, throughout=float64_throughout)
            check_cache(model, seen, want, B, b, call=texts[index], throughout=float64_throughout)


# --------------------------------------------------------------------------- generating


def generate_text(model: Model, prompt, new: int, **shown) -> str:
    parts = [describe(prompt), str(new)] + [f"{k}={v}" for k, v in shown.items()]
    return f"{model.name}.generate({', '.join(parts)})"


def run_text(model: Model, prompt, run: dict) -> str:
    shown = dict(run["settings"])
    if "seed" in shown:
        seed = shown.pop("seed")
        shown["generator"] = pick(f"<torch.Generator seeded {seed}>", f"<种子为 {seed} 的 torch.Generator>")
    return generate_text(model, prompt, run["new"], **shown)


def generated(trace: list, index: int, text: str, prompt, new: int, M: int) -> dict:
    """Run `index` of a `generating` trace: {"tokens", "prompt" as the call left it, "global rng
    moved"}; a run that raised ValueError where the tokens fit fails here (for the learner and a
    replay alike). {} for a run the story never reached."""
    if index >= len(trace):
        return {}
    record = trace[index]
    if "raised" in record:
        T = prompt.size(1)
        raise AssertionError(
            pick(
                f"{text} raised ValueError: {record['raised']}; but {T} + {new} = {T + new} tokens fit in max_len={M} "
                "(filling it exactly is fine)",
                f"{text} 抛出了 ValueError: {record['raised']}；但是 {T} + {new} = {T + new} 个 token 放得进 "
                f"max_len={M}（恰好填满是允许的）",
            )
        )
    return record


def check_tokens_form(tokens, prompt, new: int, *, call: str) -> None:
    """int64 [B, T + new] on the prompt's device, starting with the prompt."""
    B, T = prompt.shape
    check_tensor_kind(
        tokens, torch.empty(B, T + new, dtype=torch.int64, device=prompt.device), call=call, what="tokens"
    )
    if not prompt.is_meta and not torch.equal(tokens[:, :T], prompt):
        raise Mismatch(
            pick(
                f"{call} returned tokens that do not start with input_ids: "
                "return the prompt followed by the new tokens",
                f"{call} 返回的 tokens 不以 input_ids 开头：应返回 prompt，后接新生成的 token",
            ),
            what="tokens",
            actual=tokens,
            expected=prompt,
        )


def generation(implementation, model: Model, prompt, runs: list) -> list[dict]:
    """The `generating` story with `implementation`: the trace of its runs."""
    return answer(generating(implementation, model.recipe, prompt, runs))["runs"]


def judge_generation(kata, model: Model, prompt, runs: list, judge) -> None:
    """The runs of one `generating` story, one check per run: judge(index, text, record) after
    the tokens' form is checked, inside a diagnosis that replays the story on each known slip.
    A wrong token is matched on the tokens of every run of the story, not this run's alone:
    with a small vocabulary several slips often land on the same few tokens in one run."""
    texts = [run_text(model, prompt, run) for run in runs]
    M = model.case["M"]

    def replay(index: int):
        def observe(implementation) -> dict:
            trace = generation(implementation, model, prompt, runs)
            record = generated(trace, index, texts[index], prompt, runs[index]["new"], M)
            return {"tokens": record.get("tokens"), EVERY_RUN: every_run(trace)}

        return observe

    trace = None
    for index, run in enumerate(runs):
        with SPEC.diagnosing(replay(index), model.case):
            if trace is None:
                trace = generation(kata, model, prompt, runs)
            record = generated(trace, index, texts[index], prompt, run["new"], M)
            check_tokens_form(record["tokens"], prompt, run["new"], call=texts[index])
            try:
                judge(index, texts[index], record)
            except Mismatch as error:
                raise Mismatch(
                    str(error), what=EVERY_RUN, actual=every_run(trace), expected=None, tolerance=tolerance(torch.float32)
                ) from None


EVERY_RUN = "the tokens of every run, and the logits they were picked from"


def every_run(trace: list) -> tuple:
    """The story's evidence for a diagnosis: each run's tokens and the last position's logits of
    each lm_head call (or what it raised)."""
    return tuple(
        (record["tokens"], record["heads"]) if "tokens" in record else record.get("raised") for record in trace
    )


def reference_greedy(reference: Reference, prompt, new: int) -> tuple[torch.Tensor, float]:
    """The greedy continuation in float64 (the argmax of the last position, step by step), and
    the smallest gap between the top two logits met on the way."""
    ids, gap = prompt.cpu(), math.inf
    for _ in range(new):
        logits = reference(ids)["logits"][:, -1]
        top = logits.topk(2, dim=-1).values
        gap = min(gap, float((top[:, 0] - top[:, 1]).min()))
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids, gap


def decided_prompt(gen, model: Model, B: int, T: int, new: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt, the reference's greedy tokens), the prompt redrawn until every step's top two
    logits lie MARGIN apart: which token is the argmax never depends on rounding."""
    V = model.case["V"]
    for _ in range(100):
        prompt = token_ids(gen, B, T, V)
        tokens, gap = reference_greedy(model.reference, prompt, new)
        if gap >= MARGIN:
            return prompt.to(model.device), tokens
    raise RuntimeError("could not draw a prompt whose greedy steps are all decided")  # never in practice


def generation_sizes(case) -> tuple[int, int]:
    """(prompt length, new tokens) of a case: the prompt P (at least 2 where T allows), then
    tokens up to max_len exactly."""
    prompt = min(max(case["P"], 2), case["M"])
    return prompt, case["M"] - prompt


def greedy_mismatch(text: str, got, want, prompt) -> Mismatch:
    wrong = (got.cpu() != want).nonzero()[0].tolist()
    return Mismatch(
        pick(
            f"{text} returned other tokens than greedy decoding of the float64 reference: first at row {wrong[0]}, "
            f"position {wrong[1]} (new token {wrong[1] - prompt.size(1) + 1}): got {int(got[tuple(wrong)])}, expected "
            f"{int(want[tuple(wrong)])}; each new token is the argmax of the LAST position's logits (every step's "
            f"top two logits here are at least {MARGIN} apart)",
            f"{text} 返回的 token 与 float64 参考的贪心解码不同：第一处在第 {wrong[0]} 行、位置 {wrong[1]}"
            f"（第 {wrong[1] - prompt.size(1) + 1} 个新 token）：得到 {int(got[tuple(wrong)])}，期望 "
            f"{int(want[tuple(wrong)])}；每个新 token 都是【最后一个】位置的 logits 的 argmax（这里每一步最大的"
            f"两个 logits 至少相差 {MARGIN}）",
        ),
        what="tokens",
        actual=got,
        expected=want.to(got.device),
    )


def check_greedy(kata, model: Model, prompt, want) -> None:
    """generate(prompt, new) with use_cache=True, then use_cache=False: both the reference's
    greedy tokens, exactly."""
    new = want.size(1) - prompt.size(1)
    runs = [{"new": new, "settings": {"use_cache": use_cache}} for use_cache in (True, False)]

    def judge(index, text, record) -> None:
        if not torch.equal(record["tokens"].cpu(), want):
            raise greedy_mismatch(text, record["tokens"], want, prompt)

    judge_generation(kata, model, prompt, runs, judge)

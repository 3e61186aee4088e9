"""causal_lm: the conventions (the docstring's "Conventions" block): float64 computed in
float64 throughout, the ValueErrors it promises, results on input_ids' device, and inputs
left alone; each story a scenario of common.py, each check inside a diagnosis that replays
it on the known slips."""

import random

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, check_tensor_kind, describe, judge_on_device
from judge.testing.functions import assert_inputs_unchanged, raises, same_values
from judge.testing.modules import module_repr
from judge.testing.spec import FLOAT64_RULE
from judge.testing.tiers import convention

from .common import (
    CASES,
    CLS,
    SPEC,
    TOLERANCES,
    aligned_targets,
    answer,
    build,
    one_thread,  # noqa: F401 - an autouse fixture
    refusing,
    token_ids,
)
from .judging import (
    assert_close,
    cache_form,
    check_decoding,
    check_full_pass,
    check_gradients,
    decided_prompt,
    decoding_calls,
    expected_form,
    forward_text,
    generate_text,
    generated,
    generation,
    generation_sizes,
    play,
    prefix_then_chunks,
    run_text,
    step,
)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """A model in float64: one full pass with targets (logits, loss, cache) and decoding in
    pieces within float64's own tolerance, and the gradients of every parameter within 1e-12."""
    for case in CASES.cases(rng):
        with case.judged():
            model = build(gen, case, torch.float64)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            targets = aligned_targets(gen, ids, case["V"])
            check_full_pass(kata, model, ids, targets, float64_throughout=True)
            check_decoding(kata, model, ids, prefix_then_chunks(rng, case), float64_throughout=True)
    for case in [CASES.edges[0], *CASES.random(rng)]:
        with case.judged():
            model = build(gen, case, torch.float64)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_gradients(kata, model, ids, aligned_targets(gen, ids, case["V"]), float64_throughout=True)


def expect_value_error(got: dict, text: str, reason: str) -> None:
    if "returned" in got:
        raise AssertionError(
            pick(
                f"{text} returned {describe(got['returned'])}; expected ValueError ({reason})",
                f"{text} 返回了 {describe(got['returned'])}；应抛出 ValueError（{reason}）",
            )
        )
    if "ValueError" not in got["raised"]:
        raise AssertionError(
            pick(
                f"{text} raised {got['raised'][0]}: {got['message']}; expected ValueError ({reason})",
                f"{text} 抛出了 {got['raised'][0]}: {got['message']}；应抛出 ValueError（{reason}）",
            )
        )


@convention(
    "bad sizes and settings raise ValueError: d_model not divisible by num_heads, P + T > max_len in forward, "
    "T + max_new_tokens > max_len or a negative temperature in generate.",
    zh="超过 max_len 的长度和错误的设置抛出 ValueError",
)
def test_sizes_past_max_len_and_bad_settings_raise_value_error(kata, rng, gen):
    """d_model not divisible by num_heads; forward with more tokens than max_len, with or
    without a cache; generate past max_len; a negative temperature."""
    case = CASES.random(rng)[0]
    model = build(gen, case)
    B, V, layers, M = case["B"], case["V"], case["layers"], case["M"]
    held = rng.randint(1, M - 1)
    prompt = token_ids(gen, B, rng.randint(1, M), V)
    T = prompt.size(1)
    H_odd = rng.randint(2, 4)
    E_odd = H_odd * rng.randint(2, 4) + rng.randint(1, H_odd - 1)
    with case.judged():
        raises(
            SPEC.kata,
            kata,
            CLS,
            ValueError,
            (V, E_odd, H_odd, layers, M),
            {},
            reason=pick(
                f"d_model {E_odd} cannot be split evenly into {H_odd} heads",
                f"d_model {E_odd} 无法平均分成 {H_odd} 个头",
            ),
            text=module_repr(CLS, vocab_size=V, d_model=E_odd, num_heads=H_odd, num_layers=layers, max_len=M),
        )
        attempts = [
            (
                ("forward", token_ids(gen, B, M + 1, V), 0, 0, 0.0),
                f"{model.name}(int64[{B}, {M + 1}])",
                pick(
                    f"{M + 1} tokens but max_len={M}: position {M} has no embedding",
                    f"{M + 1} 个 token，但 max_len={M}：位置 {M} 没有嵌入",
                ),
            ),
            (
                ("forward with a cache", token_ids(gen, B, M + 2, V), held, 0, 0.0),
                pick(
                    f"{model.name}(int64[{B}, {M + 2 - held}], cache=<the cache of {held} tokens>)",
                    f"{model.name}(int64[{B}, {M + 2 - held}], cache=<{held} 个 token 的缓存>)",
                ),
                pick(
                    f"{held} held + {M + 2 - held} new tokens > max_len={M}",
                    f"已缓存 {held} 个 + 新的 {M + 2 - held} 个 token > max_len={M}",
                ),
            ),
            (
                ("generate", prompt, 0, M - T + 1, 0.0),
                generate_text(model, prompt, M - T + 1),
                pick(
                    f"{T} + {M - T + 1} tokens > max_len={M}: the result would exceed max_len",
                    f"{T} + {M - T + 1} 个 token > max_len={M}：结果会超过 max_len",
                ),
            ),
            (
                ("generate", prompt, 0, 1, -0.5),
                generate_text(model, prompt, 1, temperature=-0.5),
                pick("a negative temperature", "temperature 为负"),
            ),
        ]
        for arguments, text, reason in attempts:

            def attempt(implementation, arguments=arguments, text=text, reason=reason) -> dict:
                expect_value_error(answer(refusing(implementation, model.recipe, *arguments)), text, reason)
                return {}

            with SPEC.diagnosing(attempt, case):
                attempt(kata)


@convention(
    "results follow input_ids' device: logits, loss and cache (the positions and the causal mask made inside "
    "forward too), and generate's tokens.",
    zh="结果跟随输入所在的设备",
)
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """One full pass with targets, decoding in pieces, greedy generation with the cache, each on
    `other_device` (checks.judge_on_device: on "meta", the stand-in for CUDA, only their kind).
    Fixed sizes (the first edge case) and draws: a verdict on the stand-in must not depend on
    the seed."""
    case = CASES.edges[0]
    B, T, V = case["B"], case["T"], case["V"]

    def drawn(where: str) -> dict:
        gen, rng = torch.Generator().manual_seed(0), random.Random(0)
        model = build(gen, case, device=where)
        ids = token_ids(gen, B, T, V)
        targets = aligned_targets(gen, ids, V)
        prompt, want = decided_prompt(gen, model, B, *generation_sizes(case))
        chunks = prefix_then_chunks(rng, case)
        return {"model": model, "ids": ids, "targets": targets, "chunks": chunks, "prompt": prompt, "greedy": want}

    def with_cache(got: dict, model, S: int, *, call: str, after: str = "") -> dict:
        """got's logits and loss, and the cache's keys and values by block, after checking its form."""
        form = expected_form(model, B, S)
        if got["cache form"] != form:
            raise Mismatch(
                pick(
                    f"{call} returned a cache of {got['cache form']}; expected {form}",
                    f"{call} 返回的缓存是 {got['cache form']}；应为 {form}",
                ),
                what="cache form",
                actual=got["cache form"],
                expected=form,
            )
        return {f"{what}{after}": value for what, value in got.items() if what != "cache form"}

    def full_pass(where: str, check) -> None:
        d = drawn(where)
        model, ids, targets = d["model"], d["ids"].to(where), d["targets"].to(where)
        text = forward_text(model, ids, targets=targets)
        calls = [{"ids": ids, "targets": targets}]

        def replay(implementation) -> dict:
            fits = pick(f"{T} tokens fit", f"{T} 个 token 放得下")
            return step(play(implementation, model, calls), 0, text, fits=fits)

        with SPEC.diagnosing(replay, case):
            check(text, with_cache(replay(kata), model, T, call=text))

    def full_pass_expected(where: str) -> dict:
        d = drawn(where)
        want = d["model"].reference(d["ids"])
        loss = torch.nn.functional.cross_entropy(
            want["logits"].reshape(-1, V), d["targets"].reshape(-1), ignore_index=-100
        )
        found = {"logits": want["logits"], "loss": loss}
        for index, (k, v) in enumerate(zip(want["keys"], want["values"])):
            found |= {f"keys of block {index}": k, f"values of block {index}": v}
        return {what: value.detach().to(dtype=torch.float32, device=where) for what, value in found.items()}

    def decoding(where: str, check) -> None:
        d = drawn(where)
        model, ids, chunks = d["model"], d["ids"].to(where), d["chunks"]
        calls, texts, fits = decoding_calls(model, ids, chunks)

        def replay(implementation) -> dict:
            trace = play(implementation, model, calls)
            found = {}
            for n, (a, b) in enumerate(chunks):
                got = with_cache(
                    step(trace, n, texts[n], fits=fits[n]), model, b, call=texts[n], after=f" after call {n + 1}"
                )
                found |= {what: value for what, value in got.items() if not what.startswith("loss")}
            return found

        with SPEC.diagnosing(replay, case):
            check(texts[-1], replay(kata))

    def decoding_expected(where: str) -> dict:
        d = drawn(where)
        want = d["model"].reference(d["ids"])
        found = {}
        for n, (a, b) in enumerate(d["chunks"]):
            found[f"logits after call {n + 1}"] = want["logits"][:, a:b]
            for index, (k, v) in enumerate(zip(want["keys"], want["values"])):
                found |= {f"keys of block {index} after call {n + 1}": k[:, :, :b]}
                found |= {f"values of block {index} after call {n + 1}": v[:, :, :b]}
        return {what: value.detach().to(dtype=torch.float32, device=where) for what, value in found.items()}

    def generating(where: str, check) -> None:
        d = drawn(where)
        model, prompt = d["model"], d["prompt"]
        new = d["greedy"].size(1) - prompt.size(1)
        runs = [{"new": new, "settings": {}}]
        text = run_text(model, prompt, runs[0])

        def replay(implementation) -> dict:
            record = generated(generation(implementation, model, prompt, runs), 0, text, prompt, new, case["M"])
            return {"tokens": record["tokens"]}

        with SPEC.diagnosing(replay, case):
            check(text, replay(kata))

    def compare(got, want, *, call: str, what: str) -> None:
        if want.is_floating_point():
            assert_close(got, want, call=call, what=what, tolerance=TOLERANCES[want.dtype])
            return
        check_tensor_kind(got, want, call=call, what=what)
        if not torch.equal(got.cpu(), want.cpu()):
            raise Mismatch(
                pick(f"{call} returned other {what} than on the CPU", f"{call} 返回的 {what} 与在 CPU 上的不同"),
                what=what,
                actual=got,
                expected=want,
            )

    judge_on_device(full_pass, other_device, expected=full_pass_expected, compare=compare)
    judge_on_device(decoding, other_device, expected=decoding_expected, compare=compare)
    judge_on_device(
        generating, other_device, expected=lambda where: {"tokens": drawn(where)["greedy"].to(where)}, compare=compare
    )


@convention(
    "no input is changed in place: input_ids, targets and the cache given to forward (its list and its tensors), "
    "input_ids given to generate.",
    zh="forward 和 generate 不改动它们的输入",
)
def test_forward_and_generate_leave_their_inputs_alone(kata, rng, gen):
    """A prefix with targets, then the rest with targets and the prefix's cache (one
    `forwarding` story): every argument comes back as it was sent, the cache list as the
    prefix's call returned it (by value); then generate with and without the cache and
    sampling (one `generating` story): the prompt comes back as it was sent."""
    case = CASES.random(rng)[0]
    model = build(gen, case)
    B, T, P, V, M = case["B"], case["T"], case["P"], case["V"], case["M"]
    ids = token_ids(gen, B, T, V)
    targets = aligned_targets(gen, ids, V)
    calls = [{"ids": ids[:, :P], "targets": targets[:, :P]}, {"ids": ids[:, P:], "targets": targets[:, P:], "cache": 0}]
    texts = [forward_text(model, ids[:, :P], targets=targets[:, :P])]
    texts.append(forward_text(model, ids[:, P:], targets=targets[:, P:], held=P))
    fits = [
        pick(f"{P} tokens fit in max_len={M}", f"{P} 个 token 放得进 max_len={M}"),
        pick(
            f"{P} held + {T - P} new = {T} tokens fit in max_len={M}",
            f"已缓存 {P} 个 + 新的 {T - P} 个 = {T} 个 token，放得进 max_len={M}",
        ),
    ]
    prompt = ids[:, :P]
    settings = [
        {"use_cache": True},
        {"use_cache": False},
        {"temperature": 1.0, "top_k": 3, "seed": rng.randrange(2**31)},
    ]
    runs = [{"new": M - P, "settings": chosen} for chosen in settings]

    def check(implementation) -> dict:
        trace = play(implementation, model, calls)
        for n, call in enumerate(calls):
            step(trace, n, texts[n], fits=fits[n])
            sent = {"input_ids": call["ids"], "targets": call["targets"]}
            assert_inputs_unchanged(texts[n], sent, {"input_ids": trace[n]["ids"], "targets": trace[n]["targets"]})
        held, came = trace[0]["result"][2], trace[1]["cache given"]
        if not same_structure(held, came):
            raise AssertionError(
                pick(
                    f"{texts[1]} changed the cache it was given (it came back as {cache_form(came)}): forward never "
                    "changes the cache it is given; build a new list of new tensors (torch.cat), so one prefix's cache "
                    "can serve several continuations",
                    f"{texts[1]} 改动了传给它的缓存（回来时是 {cache_form(came)}）：forward 绝不改动传入的缓存；"
                    "请用新张量（torch.cat）组成一个新列表，这样同一个前缀的缓存才能服务多个续写",
                )
            )
        runs_trace = generation(implementation, model, prompt, runs)
        for n, run in enumerate(runs):
            text = run_text(model, prompt, run)
            record = generated(runs_trace, n, text, prompt, run["new"], M)
            assert_inputs_unchanged(text, {"input_ids": prompt}, {"input_ids": record["prompt"]})
        return {}

    with case.judged(), SPEC.diagnosing(check, case):
        check(kata)


def same_structure(sent, came) -> bool:
    """Whether `came` holds exactly `sent`'s values, container by container, tensor by tensor."""
    if isinstance(sent, torch.Tensor):
        return same_values(sent, came)
    if isinstance(sent, (list, tuple)):
        return (
            isinstance(came, (list, tuple))
            and len(came) == len(sent)
            and all(same_structure(a, b) for a, b in zip(sent, came))
        )
    return type(sent) is type(came) and repr(sent) == repr(came)

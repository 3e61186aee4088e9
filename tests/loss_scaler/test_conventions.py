"""loss_scaler: the conventions. Arguments that make no dynamic scale raise ValueError, enabled or
not (GradScaler raises AssertionError, and only when enabled: a deliberate difference);
unscale_ twice before update() raises RuntimeError; step passes its arguments on to
optimizer.step and returns its result (the story with step(optimizer, note=...)); state_dict()
round-trips, into a new LossScaler and from GradScaler's own (the story with a resume midway,
against GradScaler's uninterrupted run); float64 throughout (the story in float64 with scales
that are powers of two, where every method is exact, within float64's tolerance)."""

import torch

from judge.forbidden import ForbiddenCallError
from judge.language import pick
from judge.testing.checks import Mismatch, call_repr
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE
from judge.testing.tiers import convention

from .common import (
    CASES,
    CORE_KINDS,
    EDGES,
    SPEC,
    CountingSGD,
    forward,
    judge_story,
    powers_of_two,
    recipe,
    twin,
)


def outcome(fn) -> str:
    """What a call did: "returned normally", or the class of what it raised. The stub's
    NotImplementedError and the guard's refusals propagate."""
    try:
        fn()
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the judge says what was raised
        return type(error).__name__
    return "returned normally"


@scenario
def constructed(kata, keyword_sets: list) -> list:
    """What LossScaler(**keywords) did, for each keyword set."""
    return [outcome(lambda keywords=keywords: kata.LossScaler(**keywords)) for keywords in keyword_sets]


@scenario
def unscaled_twice(kata, made: dict) -> str:
    """One step's scale(loss).backward() and unscale_(), then unscale_() again: what it did."""
    params = [torch.nn.Parameter(p.clone()) for p in made["params"]]
    optimizer = CountingSGD(params, lr=0.1)
    scaler = kata.LossScaler(**made["scaler"])
    scaler.scale(forward(params, made["x"], made["t"])[0]).backward()
    scaler.unscale_(optimizer)
    return outcome(lambda: scaler.unscale_(optimizer))


def said(got: str) -> str:
    return pick("returned normally", "正常返回") if got == "returned normally" else pick(f"raised {got}", f"抛出 {got}")


BAD = (
    {"growth_factor": 1.0},
    {"growth_factor": 0.5},
    {"backoff_factor": 1.0},
    {"backoff_factor": 0.0},
    {"backoff_factor": -0.5},
    {"backoff_factor": 1.5},
    {"growth_interval": 0},
    {"growth_interval": -3},
)


@convention(
    "growth_factor <= 1, backoff_factor outside (0, 1) or growth_interval < 1 raises ValueError in __init__, "
    "enabled or not.",
    zh="不合法的因子或间隔在 __init__ 中抛出 ValueError（无论是否启用）",
)
def test_arguments_that_make_no_dynamic_scale_raise_value_error(kata):
    sets = [bad | {"enabled": enabled} for enabled in (True, False) for bad in BAD]
    with SPEC.diagnosing(lambda implementation: {"outcomes": constructed(implementation, sets)}):
        got = constructed(kata, sets)
        for keywords, did in zip(sets, got):
            if did != "ValueError":
                raise Mismatch(
                    pick(
                        f"{call_repr('LossScaler', **keywords)} {said(did)}; expected ValueError",
                        f"{call_repr('LossScaler', **keywords)} {said(did)}；应抛出 ValueError",
                    ),
                    what="outcomes",
                    actual=got,
                    expected=None,
                )


@convention(
    "calling unscale_ twice before update() raises RuntimeError.", zh="update() 之前两次调用 unscale_ 抛出 RuntimeError"
)
def test_unscale_twice_in_a_step_raises_runtime_error(kata, rng, gen):
    made = recipe(gen, CASES.random(rng, 1)[0] | {"scaler": {"init_scale": 256.0}}, torch.float32)
    with SPEC.diagnosing(lambda implementation: {"outcome": unscaled_twice(implementation, made)}):
        got = unscaled_twice(kata, made)
        if got != "RuntimeError":
            raise Mismatch(
                pick(
                    f"scale(loss).backward(); unscale_(optimizer); unscale_(optimizer) {said(got)}; expected "
                    "RuntimeError: a second unscale_ would divide the gradients by the scale twice",
                    f"scale(loss).backward(); unscale_(optimizer); unscale_(optimizer) {said(got)}；应抛出 "
                    "RuntimeError：第二次 unscale_ 会把梯度再除一次 scale",
                ),
                what="outcome",
                actual=got,
                expected="RuntimeError",
            )


@convention(
    "step(optimizer, *args, **kwargs) passes its arguments on to optimizer.step and returns its result "
    "(None when the step is skipped).",
    zh="step 把参数传给 optimizer.step 并返回其结果（跳过时返回 None）",
)
def test_step_passes_its_arguments_on_and_returns_the_result(kata, rng, gen):
    """The story of the first edge case (an overflow, then clean steps) and a random one, with
    step(optimizer, note=...): SGD here returns its note."""
    for case in (EDGES[0], *CASES.random(rng, 1)):
        with case.judged():
            judge_story(kata, recipe(gen, case, torch.float32, note=True), kinds=("returned", *CORE_KINDS))


@convention(
    "state_dict() round-trips: a new LossScaler with the same arguments that loads it (or GradScaler's own "
    "state_dict) continues exactly as the first would.",
    zh="state_dict() 可以往返：载入它（或 GradScaler 的 state_dict）的新 LossScaler 继续得与原来完全一样",
)
def test_state_dict_round_trips(kata, rng, gen):
    """Midway through the story (where the growth tracker is not 0), a new LossScaler loads the
    old one's state_dict(), then (a second run) GradScaler's at the same point, and takes over:
    the rest of the story is GradScaler's uninterrupted one."""
    for case, at in ((EDGES[3], 3), (CASES.random(rng, 1)[0], 3)):
        with case.judged():
            plain = recipe(gen, case, torch.float32)
            want = twin(plain)
            theirs = want["steps"][at - 2]["state"]  # GradScaler's state after step at - 1
            for state in (None, theirs):
                judge_story(kata, plain | {"resume": {"at": at, "state": state}}, want=want)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The story in float64, every scale a power of two (GradScaler's float32 reciprocal is then
    exact, and so is every way of unscaling), held to float64's tolerances."""
    for case in (EDGES[2], EDGES[6], *CASES.random(rng, 2)):
        with case.judged():
            judge_story(kata, recipe(gen, powers_of_two(case), torch.float64), float64_throughout=True)

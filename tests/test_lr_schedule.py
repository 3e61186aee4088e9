"""lr_schedule: lr_at judged against the warmup-cosine formula in float64, make_scheduler by a story.

lr_at(step, max_lr, min_lr, warmup_steps, decay_steps) is evaluated where the kata lives on
every step from 0 to decay_steps + 2 and far past it (10 x decay_steps, 1e9), in one
scenario per schedule, and compared with the formula written here in Python's math
(float64): CS336 assignment 1's expected values for its schedule (max 1, min 0.1, warmup 7,
cycle 21) first, then the named schedules (no warmup, no decay phase, both, min_lr = max_lr,
a long decay to 0, one warmup step, far past the decay) and seeded draws; the decay phase
also against CosineAnnealingLR's closed form. make_scheduler is one story: SGD with two param
groups whose own lr must not matter, the scheduler made and stepped 50 times, each group's
lr read from the optimizer after each step; and, as a convention, a resume from its
state_dict() after 12 steps.

Tolerances: see `tolerance` below; the measured figures are in the comment above it.
"""

import copy
import math

import torch

from judge.forbidden import LR_SCHEDULE
from judge.language import pick
from judge.testing.checks import Mismatch, call_repr, distinct
from judge.testing.functions import FunctionKata
from judge.testing.scenarios import raised, scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core

EPS = torch.finfo(torch.float64).eps
NAMES = ("max_lr", "min_lr", "warmup_steps", "decay_steps")

# CS336 assignment 1, tests/test_optimizer.py::test_get_lr_cosine_schedule: its schedule and
# the learning rates it expects at steps 0 to 24 (they differ from the formula in float64 by
# up to 5.6e-16 relative: compared with its own relative tolerance, CS336_RTOL).
CS336 = {"max_lr": 1.0, "min_lr": 0.1, "warmup_steps": 7, "decay_steps": 21}
CS336_LRS = (
    0.0, 0.14285714285714285, 0.2857142857142857, 0.42857142857142855, 0.5714285714285714,
    0.7142857142857143, 0.8571428571428571, 1.0, 0.9887175604818206, 0.9554359905560885,
    0.9018241671106134, 0.8305704108364301, 0.7452476826029011, 0.6501344202803414, 0.55,
    0.44986557971965857, 0.3547523173970989, 0.26942958916356996, 0.19817583288938662,
    0.14456400944391146, 0.11128243951817937, 0.1, 0.1, 0.1, 0.1,
)  # fmt: skip
CS336_RTOL = 1e-9


# --------------------------------------------------------------------------- tolerances

# (rtol, atol) of a learning rate, from the schedule's max_lr: rtol = ROUND * eps, atol =
# SHIFT * eps * max_lr (float64's eps). The honest forms round differently: max_lr * step /
# warmup_steps or step / warmup_steps * max_lr; min + c * (max - min), or max * (c * (1 - r) + r)
# with r = min / max (transformers), or max - (max - min) * (1 - cos) / 2; LambdaLR's
# max_lr * (lr_at / max_lr). Near the end of a decay to min_lr = 0 the value is tiny and
# 1 + cos(pi p) (or max - ...) cancels: the error stays about eps * max_lr absolute, many eps
# relative, hence the atol.
# Measured over 100 seeds x every case of both tables (8 + 1 edge cases, 3 + 1 random draws,
# every step judged, the decay phases also against CosineAnnealingLR), worst error as a
# fraction of the allowed one, for the solution, both variants and transformers' lambda glued
# to the signature: lr_at 0.125 (one ulp of the value), the scheduler's lrs 0.10 (resumed
# ones included); CS336's values at most 7.5e-7 of CS336_RTOL. The slips are off by a warmup
# step or more (above 1e-3 * max_lr), or raise.
ROUND = 8
SHIFT = 8


def tolerance(schedule: dict) -> dict:
    return {"rtol": ROUND * EPS, "atol": SHIFT * EPS * schedule["max_lr"]}


# --------------------------------------------------------------------------- the case table

# A schedule: max_lr, min_lr, warmup_steps, decay_steps; `far`: steps judged beyond the usual
# ones (every schedule is judged at 0 .. decay_steps + 2, 10 x decay_steps and 1e9).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("CS336's schedule: max 1, min 0.1, warmup 7, cycle 21", "CS336 的调度：max 1、min 0.1、预热 7、周期 21",
         max_lr=1.0, min_lr=0.1, warmup_steps=7, decay_steps=21),
    edge("no decay phase: decay_steps == warmup_steps", "没有衰减阶段：decay_steps == warmup_steps",
         max_lr=1e-3, min_lr=1e-4, warmup_steps=5, decay_steps=5),
    edge("no warmup: warmup_steps 0, step 0 is max_lr", "没有预热：warmup_steps 为 0，第 0 步就是 max_lr",
         max_lr=3e-4, min_lr=3e-5, warmup_steps=0, decay_steps=10),
    edge("no warmup and no decay phase: max_lr at step 0, min_lr after", "既无预热也无衰减：第 0 步为 max_lr，之后为 min_lr",
         max_lr=0.5, min_lr=0.05, warmup_steps=0, decay_steps=0),
    edge("far past decay_steps: min_lr, the cosine never rises again", "远超 decay_steps：保持 min_lr，余弦不再回升",
         max_lr=2.0, min_lr=0.2, warmup_steps=3, decay_steps=8, far=(17, 100, 12345, 10**12)),
    edge("min_lr equals max_lr: constant after the warmup", "min_lr 等于 max_lr：预热后为常数",
         max_lr=2e-3, min_lr=2e-3, warmup_steps=4, decay_steps=12),
    edge("min_lr 0 and a long decay: the cosine ends near 0", "min_lr 为 0、衰减很长：余弦末端接近 0",
         max_lr=6e-4, min_lr=0.0, warmup_steps=20, decay_steps=300),
    edge("one warmup step", "只预热一步",
         max_lr=1.0, min_lr=0.0, warmup_steps=1, decay_steps=9),
)
# fmt: on


def draw_schedules(rng, count: int) -> list[dict]:
    """max_lr log-uniform in [1e-5, 1]; min_lr 0, a tenth, any fraction, or all of it; warmup
    0 to 40 steps (0 a quarter of the time); a decay phase of 0 to 200 steps."""
    cases = []
    for _ in range(count):
        max_lr = 10 ** rng.uniform(-5, 0)
        ratio = rng.choice((0.0, 0.1, rng.random(), 1.0))
        warmup = 0 if rng.random() < 0.25 else rng.randint(1, 40)
        decay = warmup + (0 if rng.random() < 0.1 else rng.randint(1, 200))
        cases.append(
            {"max_lr": max_lr, "min_lr": max_lr * ratio, "warmup_steps": warmup, "decay_steps": decay}
        )
    return cases


CASES = CaseTable(draw=draw_schedules, edges=EDGES, draws=3)


def schedule_of(case) -> dict:
    """The keyword arguments of lr_at and make_scheduler."""
    return {name: case[name] for name in NAMES}


def steps_of(case) -> list[int]:
    """Every step from 0 to decay_steps + 2, 10 x decay_steps, 1e9 and the case's own far ones."""
    decay = case["decay_steps"]
    return sorted(set(range(decay + 3)) | {10 * decay, 10**9} | set(case.get("far", ())))


# --------------------------------------------------------------------------- the reference


def reference_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """The warmup-cosine formula in Python's math (float64), written from the contract."""
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step > decay_steps:
        return min_lr
    if decay_steps == warmup_steps:
        return max_lr
    cosine = math.cos(math.pi * (step - warmup_steps) / (decay_steps - warmup_steps))
    return min_lr + 0.5 * (1.0 + cosine) * (max_lr - min_lr)


def expected(steps, schedule: dict) -> torch.Tensor:
    return torch.tensor([reference_lr(step, **schedule) for step in steps], dtype=torch.float64)


def cosine_annealing_lrs(steps, schedule: dict) -> torch.Tensor:
    """torch's CosineAnnealingLR(T_max=decay - warmup, eta_min=min_lr) from base lr max_lr, its
    closed form at last_epoch = step - warmup_steps, for steps of the decay phase."""
    warmup, span = schedule["warmup_steps"], schedule["decay_steps"] - schedule["warmup_steps"]
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=schedule["max_lr"])
    annealing = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=span, eta_min=schedule["min_lr"])
    lrs = []
    for step in steps:
        annealing.last_epoch = step - warmup
        lrs.append(annealing._get_closed_form_lr()[0])
    return torch.tensor(lrs, dtype=torch.float64)


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


def plain(value):
    """A number as the wire carries it (int or float; a float subclass as float); anything
    else (a tensor, None, a bool) as a short description."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if isinstance(value, float) else int(value)
    return f"{type(value).__name__} {value!r}"[:100]


@scenario
def evaluated(kata, steps: list, schedule: dict) -> list:
    """kata.lr_at(step, **schedule) for each step: what it returned; it stops at the first
    exception, recorded as its text ("raised ZeroDivisionError: ...")."""
    found = []
    for step in steps:
        try:
            found.append(plain(kata.lr_at(step, **schedule)))
        except Exception as error:  # noqa: BLE001 - the judge says which step raised
            found.append(raised(error))
            break
    return found


def optimizer_with_groups(group_lrs: list) -> torch.optim.Optimizer:
    """SGD over one small parameter per group, each group with its own lr."""
    params = [torch.zeros(3, requires_grad=True) for _ in group_lrs]
    return torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, group_lrs)], lr=1.0)


def group_lrs(optimizer) -> list:
    return [plain(group["lr"]) for group in optimizer.param_groups]


def stepping(optimizer, scheduler, steps: int) -> list:
    """`steps` times optimizer.step() and scheduler.step(): every group's lr after each; it
    stops at an exception, recorded as its text."""
    trace = []
    for _ in range(steps):
        try:
            optimizer.step()
            scheduler.step()
        except Exception as error:  # noqa: BLE001 - the judge says which step raised
            trace.append(raised(error))
            break
        trace.append(group_lrs(optimizer))
    return trace


@scenario
def stepped(kata, schedule: dict, lrs: list, steps: int) -> list:
    """The story of make_scheduler: an SGD with a param group per lr in `lrs`, the scheduler
    made, then `steps` times optimizer.step() and scheduler.step(). The trace: every group's
    lr right after make_scheduler, then after each step; it stops at an exception (its text)."""
    optimizer = optimizer_with_groups(lrs)
    scheduler = kata.make_scheduler(optimizer, **schedule)
    return [group_lrs(optimizer), *stepping(optimizer, scheduler, steps)]


@scenario
def resumed(kata, schedule: dict, lrs: list, saved_at: int, after: int) -> list:
    """A checkpoint's resume: a scheduler stepped `saved_at` times gives its state_dict() (a deep
    copy); a new optimizer with the same groups gets a new make_scheduler, which loads it; then
    `after` more steps. The trace: every group's lr after each of them."""
    first = optimizer_with_groups(lrs)
    scheduler = kata.make_scheduler(first, **schedule)
    for _ in range(saved_at):
        first.step()
        scheduler.step()
    state = copy.deepcopy(scheduler.state_dict())
    optimizer = optimizer_with_groups(lrs)
    scheduler = kata.make_scheduler(optimizer, **schedule)
    scheduler.load_state_dict(state)
    return stepping(optimizer, scheduler, after)


@scenario
def made(kata, schedule: dict) -> str:
    """What make_scheduler(SGD, **schedule) did: "returned normally" or "raised <Error>: ..."."""
    try:
        kata.make_scheduler(optimizer_with_groups([0.1]), **schedule)
    except Exception as error:  # noqa: BLE001 - the judge decides what was expected
        return raised(error)
    return "returned normally"


# --------------------------------------------------------------------------- the judging process's side


def as_values(found: list) -> torch.Tensor | tuple:
    """The learning rates as a float64 tensor when every one is a number; else (index, text) of
    the first entry that is not (what was returned or raised instead): the diagnosis compares
    slips by it."""
    for index, value in enumerate(found):
        if not isinstance(value, (int, float)):
            return (index, value)
    return torch.tensor(found, dtype=torch.float64)


def said(text: str, zh: bool = False) -> str:
    """'raised X: ...', 'returned normally' or 'Tensor tensor(0.1)' as the verb of a sentence."""
    if text.startswith("raised "):
        return ("抛出了 " + text.removeprefix("raised ")) if zh else text
    if text == "returned normally":  # made()'s word for a call that raised nothing
        return "正常返回了" if zh else text
    return f"返回了 {text}" if zh else f"returned {text}"


def check_lrs(got, want: torch.Tensor, allowed: dict, *, where, call: str, what: str = "lr") -> None:
    """got (from as_values) against want, one lr per entry; where(i, zh) names entry i ("at step 8")."""
    if isinstance(got, tuple) or got.shape != want.shape:
        index, text = got if isinstance(got, tuple) else (len(got), "stopped")
        shown = f"{want[index].item()!r}" if index < len(want) else "-"
        raise Mismatch(
            pick(
                f"{call} {said(text)} {where(index)}; expected the float {shown}",
                f"{call} {where(index, zh=True)}{said(text, zh=True)}；应为 float {shown}",
            ),
            what=what,
            actual=got,
            expected=want,
        )
    diff = (got - want).abs()
    excess = diff / (allowed["atol"] + allowed["rtol"] * want.abs())
    off = excess > 1
    if off.any():
        worst = int(excess.argmax())
        shown_got, shown_want = distinct(float(got[worst]), float(want[worst]))
        limits = f"{allowed['atol']:.3g} + {allowed['rtol']:.3g} * |expected|"
        raise Mismatch(
            pick(
                f"{call} gives wrong learning rates at {int(off.sum())} of {off.numel()} points; the worst is "
                f"{where(worst)}: got {shown_got}, expected {shown_want}, off by {float(diff[worst]):.3g} "
                f"(allowed: {limits})",
                f"{call} 在 {off.numel()} 处中有 {int(off.sum())} 处学习率不对；最差的一处{where(worst, zh=True)}："
                f"得到 {shown_got}，应为 {shown_want}，相差 {float(diff[worst]):.3g}（允许：{limits}）",
            ),
            what=what,
            actual=got,
            expected=want,
            tolerance=allowed,
        )


def lr_text(schedule: dict) -> str:
    """lr_at(step, max_lr=..., ...): how the calls looked."""
    return "lr_at(step, " + ", ".join(f"{k}={v!r}" for k, v in schedule.items()) + ")"


def at_steps(steps: list):
    """where(i, zh) for a trace of lr_at over `steps`."""
    return lambda i, zh=False: (f"在第 {steps[i]} 步" if zh else f"at step {steps[i]}") if i < len(steps) else ""


def judge_lr_at(kata, schedule: dict, steps: list, want: torch.Tensor, allowed: dict) -> None:
    """kata.lr_at(step, **schedule) for every step, against want; a failure is diagnosed."""

    def replay(implementation) -> dict:
        return {"lr": as_values(evaluated(implementation, steps, schedule))}

    with SPEC.diagnosing(replay, schedule):
        check_lrs(replay(kata)["lr"], want, allowed, where=at_steps(steps), call=lr_text(schedule))


def after_steps(groups: int, first_step: int):
    """where(i, zh) for a flattened trace of every group's lr after each scheduler step."""

    def where(i: int, zh: bool = False) -> str:
        step, group = first_step + i // groups, i % groups
        if zh:
            when = "刚调用 make_scheduler 之后" if step == 0 else f"第 {step} 次 scheduler.step() 之后"
            return f"（参数组 {group}，{when}）"
        when = "right after make_scheduler" if step == 0 else f"after {step} scheduler.step() calls"
        return f"(param group {group}, {when})"

    return where


def flat_values(trace: list):
    """A trace of rows (every group's lr, or the text of an exception) as as_values of its entries."""
    return as_values([value for row in trace for value in (row if isinstance(row, list) else [row])])


def story_text(schedule: dict, extra: str = "") -> str:
    arguments = ", ".join(f"{k}={v!r}" for k, v in schedule.items())
    return pick(
        f"make_scheduler(SGD with param groups at lr {GROUP_LRS}, {arguments}){extra}",
        f"make_scheduler(参数组 lr 为 {GROUP_LRS} 的 SGD, {arguments}){extra}",
    )


# Two groups whose own lr is neither max_lr nor 1: a scheduler that scales them shows.
GROUP_LRS = [0.3, 7.0]
STORY_STEPS = 50
SAVED_AT, RESUMED_FOR = 12, 3


def story_draws(rng, count: int) -> list[dict]:
    """Schedules the 50 steps cover: warmup 1 to 12, the decay over by step 42, min_lr 0 or a tenth."""
    cases = []
    for _ in range(count):
        warmup, max_lr = rng.randint(1, 12), 10 ** rng.uniform(-4, -1)
        cases.append({"max_lr": max_lr, "min_lr": max_lr * rng.choice((0.0, 0.1)), "warmup_steps": warmup,
                      "decay_steps": warmup + rng.randint(5, 30)})  # fmt: skip
    return cases


# fmt: off
STORY_CASES = CaseTable(draw=story_draws, draws=1, edges=(
    edge("scheduler over 50 steps: CS336's schedule at max_lr 0.02", "调度器走 50 步：CS336 的调度，max_lr 为 0.02",
         max_lr=0.02, min_lr=0.002, warmup_steps=7, decay_steps=21),
))
# fmt: on


def benchmark(kata, device):
    """(kata call, reference call): an SGD over one parameter, the scheduler made and stepped
    200 times (warmup 20, decay to step 150); the reference is torch's SequentialLR of a
    LinearLR warmup and a CosineAnnealingLR (built inside the call: the kata process refuses them)."""
    schedule = {"max_lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 20, "decay_steps": 150}
    param = torch.zeros(8, requires_grad=True, device=device)

    def kata_call():
        optimizer = torch.optim.SGD([param], lr=1.0)
        scheduler = kata.make_scheduler(optimizer, **schedule)
        for _ in range(200):
            optimizer.step()
            scheduler.step()

    def reference_call():
        from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

        optimizer = torch.optim.SGD([param], lr=3e-4)
        warmup = LinearLR(optimizer, start_factor=1e-3, total_iters=20)
        cosine = CosineAnnealingLR(optimizer, T_max=130, eta_min=3e-5)
        scheduler = SequentialLR(optimizer, [warmup, cosine], milestones=[20])
        for _ in range(200):
            optimizer.step()
            scheduler.step()

    return kata_call, reference_call


SPEC = KataSpec(
    kata="lr_schedule",
    symbol="lr_at",
    reference=(
        "the warmup-cosine formula in Python's math (float64); CS336's expected values; CosineAnnealingLR's closed form"
    ),
    forbidden=LR_SCHEDULE,
    also={"make_scheduler": LR_SCHEDULE},
    tolerances={torch.float64: {"rtol": ROUND * EPS, "atol": SHIFT * EPS}},
    tolerance_note=(
        "Python floats; atol shown for max_lr = 1 (it is 8 eps * max_lr: a decay to 0 cancels near its end); "
        "CS336's values within 1e-9 relative: the solution and variants measured at most 0.13 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)
LR = FunctionKata(SPEC, outputs="lr", parameters={"lr_at": ("step",)})


# --------------------------------------------------------------------------- the math


@core(zh="lr_at 给出 CS336 测试期望的学习率")
def test_lr_at_gives_cs336s_expected_values(kata):
    """Steps 0 to 24 of CS336's schedule, against the values its own test lists."""
    steps = list(range(len(CS336_LRS)))
    with EDGES[0].judged():
        want = torch.tensor(CS336_LRS, dtype=torch.float64)
        judge_lr_at(kata, CS336, steps, want, {"rtol": CS336_RTOL, "atol": 0.0})


@core(zh="lr_at 在每个调度的每一步都与公式一致")
def test_lr_at_matches_the_formula_at_every_step(kata, rng):
    for case in CASES.cases(rng):
        with case.judged():
            schedule, steps = schedule_of(case), steps_of(case)
            judge_lr_at(kata, schedule, steps, expected(steps, schedule), tolerance(schedule))


@core(zh="衰减阶段与 CosineAnnealingLR 的闭式解一致")
def test_the_decay_phase_matches_cosine_annealing(kata, rng):
    """The steps from warmup_steps to decay_steps against torch's own cosine (a second reference)."""
    for case in (EDGES[0], EDGES[6], *CASES.random(rng, 2)):
        if case["decay_steps"] == case["warmup_steps"]:
            continue  # no decay phase: T_max would be 0
        with case.judged():
            schedule = schedule_of(case)
            steps = list(range(case["warmup_steps"], case["decay_steps"] + 1))
            judge_lr_at(kata, schedule, steps, cosine_annealing_lrs(steps, schedule), tolerance(schedule))


@core(zh="make_scheduler 让每个参数组在每一步都得到 lr_at")
def test_the_scheduler_sets_every_group_to_lr_at_after_each_step(kata, rng):
    """The story: SGD with groups at lr 0.3 and 7.0, make_scheduler, 50 steps; every group's lr
    read from the optimizer, right after make_scheduler and after each step."""
    for case in STORY_CASES.cases(rng):
        schedule = schedule_of(case)
        want = [reference_lr(step, **schedule) for step in range(STORY_STEPS + 1) for _ in GROUP_LRS]

        def replay(implementation, schedule=schedule) -> dict:
            return {"group lrs": flat_values(stepped(implementation, schedule, GROUP_LRS, STORY_STEPS))}

        with case.judged(), SPEC.diagnosing(replay, schedule):
            check_lrs(
                replay(kata)["group lrs"],
                torch.tensor(want, dtype=torch.float64),
                tolerance(schedule),
                where=after_steps(len(GROUP_LRS), 0),
                call=story_text(schedule),
                what="group lrs",
            )


# --------------------------------------------------------------------------- conventions

BAD_SCHEDULES = (  # (what is wrong, the schedule)
    ("warmup_steps < 0", {"max_lr": 1e-3, "min_lr": 1e-4, "warmup_steps": -1, "decay_steps": 10}),
    ("decay_steps < warmup_steps", {"max_lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 10, "decay_steps": 9}),
    ("max_lr <= 0", {"max_lr": 0.0, "min_lr": 0.0, "warmup_steps": 2, "decay_steps": 10}),
    ("max_lr <= 0", {"max_lr": -1e-3, "min_lr": 0.0, "warmup_steps": 2, "decay_steps": 10}),
    ("min_lr < 0", {"max_lr": 1e-3, "min_lr": -1e-5, "warmup_steps": 2, "decay_steps": 10}),
    ("min_lr > max_lr", {"max_lr": 1e-3, "min_lr": 2e-3, "warmup_steps": 2, "decay_steps": 10}),
)


@convention(
    "ValueError for warmup_steps < 0, decay_steps < warmup_steps, max_lr <= 0, min_lr < 0, "
    "min_lr > max_lr, or step < 0.",
    zh="不合理的调度或负的 step 抛出 ValueError",
)
def test_an_impossible_schedule_or_a_negative_step_raises_value_error(kata):
    for reason, schedule in BAD_SCHEDULES:
        LR.assert_raises(kata, ValueError, 3, symbol="lr_at", reason=reason, **schedule)
    LR.assert_raises(kata, ValueError, -1, symbol="lr_at", reason="step < 0", **CS336)


@convention(
    "make_scheduler raises the same ValueError as lr_at for an impossible schedule.",
    zh="make_scheduler 对不合理的调度抛出 ValueError",
)
def test_make_scheduler_refuses_an_impossible_schedule(kata):
    for reason, schedule in BAD_SCHEDULES:
        call = call_repr("make_scheduler", "SGD", **schedule)

        def replay(implementation, schedule=schedule) -> dict:
            return {"outcome": made(implementation, schedule)}

        with SPEC.diagnosing(replay, schedule):
            outcome = replay(kata)["outcome"]
            if not outcome.startswith("raised ValueError"):
                raise Mismatch(
                    pick(
                        f"{call} {said(outcome)}; expected ValueError ({reason})",
                        f"{call} {said(outcome, zh=True)}；应抛出 ValueError（{reason}）",
                    ),
                    what="outcome",
                    actual=outcome,
                    expected="raised ValueError",
                )


@convention(
    "state_dict() round-trips: a scheduler that make_scheduler builds on a fresh optimizer and that loads the "
    "state_dict() of one stepped n times gives lr_at(n + 1) after one step()",
    zh="调度器可以从 state_dict() 恢复并接着走",
)
def test_a_scheduler_resumed_from_its_state_dict_carries_on(kata, rng):
    """Saved after 12 steps (in the decay, or past it), loaded by a new scheduler, then 3 more steps."""
    for case in STORY_CASES.cases(rng):
        schedule = schedule_of(case)
        steps = range(SAVED_AT + 1, SAVED_AT + RESUMED_FOR + 1)
        want = [reference_lr(step, **schedule) for step in steps for _ in GROUP_LRS]
        text = pick(f".load_state_dict(its state after {SAVED_AT} steps)", f".load_state_dict(走 {SAVED_AT} 步后的状态)")

        def replay(implementation, schedule=schedule) -> dict:
            return {"resumed lrs": flat_values(resumed(implementation, schedule, GROUP_LRS, SAVED_AT, RESUMED_FOR))}

        with case.judged(), SPEC.diagnosing(replay, schedule):
            check_lrs(
                replay(kata)["resumed lrs"],
                torch.tensor(want, dtype=torch.float64),
                tolerance(schedule),
                where=after_steps(len(GROUP_LRS), SAVED_AT + 1),
                call=story_text(schedule, text),
                what="resumed lrs",
            )

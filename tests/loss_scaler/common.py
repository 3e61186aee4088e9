"""loss_scaler: what its tests share: the SPEC, the case table, the story (ONE scenario that plays
a whole training run where the kata lives and returns its trace), its float64 twin driven by
torch.amp.GradScaler("cpu"), the tolerances and the step-by-step comparison.

The story: a tiny model (loss = mean((tanh(x @ W1 + b1) @ W2 - t)**2), and, in some cases, a
parameter `u` the loss never uses, so its .grad stays None) trained by SGD (momentum 0.5, one
or two param groups) under the learner's LossScaler(**arguments). Each step of a script runs
zero_grad -> scale(loss).backward() -> the script's poison (inf, -inf or NaN written into one
gradient element) -> [unscale_() -> clip_grad_norm_(max_norm), when the step says "clip"] ->
step(optimizer) -> update(), and records what the scaler and the optimizer did: the scaled
loss, the scale after unscale_, step and update, the gradients after unscale_ and after step,
how many times optimizer.step() was called, the parameters, state_dict(). The twin plays the
same story in float64 (the learner's values, float32 or float64, cast up) with GradScaler in
the learner's place: the expected trace. Each observation is compared in the story's order,
inside a diagnosis that replays the story on every known slip.

Tolerances (rtol, atol), eps the judged dtype's (float32's for a float64 run in the core tier,
spec.FLOAT64_RULE), every scale from the twin's trace:
  scales (get_scale, state_dict's): rtol SCALE_RTOL = 2**-20 (GradScaler keeps a float32
    scale: a Python float differs by one float32 rounding per update; the scripts have <= 8);
  the scaled loss: rtol ROUND * eps + SCALE_RTOL, atol SHIFT * eps * scale * L (L = mean of
    (|prediction| + |t|)**2, what the loss sums before cancelling);
  gradients: rtol ROUND * eps + 2**-23 (GradScaler's reciprocal rounded to float32), atol
    SHIFT * eps * G * k (G = the largest twin gradient of step k: the parameters they are taken
    at drift from the twin's by a rounding a step);
  parameters: rtol ROUND * eps, atol SHIFT * eps * P (P = the largest twin parameter plus,
    for every step taken so far, 2 * lr * the largest gradient: momentum 0.5 at most doubles it);
  the step count and the growth tracker: exactly.
Measured over 100 seeds x every case (float32, float64 in the core tier, and the float64
rule's float64 runs), on the solution, the tensor-state variant and Megatron-LM's glued one, worst
error as a fraction of the allowed: gradients 0.33 (float32), scales 0.19, the scaled loss
0.09, parameters 0.08; in the float64 rule's runs 0 (powers of two: every method is exact).
"""

from __future__ import annotations

import functools
import types

import torch

from judge.forbidden import LOSS_SCALING, ForbiddenCallError
from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, call_repr
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge
from judge.testing.tolerances import per_dtype

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases run in it, and show first
ROUND, SHIFT = 8, 8
SCALE_RTOL = 2.0**-20
HALF_ULP32 = 2.0**-23
N, I, H = 8, 4, 5  # samples, inputs, hidden units of the tiny model
MOMENTUM = 0.5
NAMES = ("W1", "b1", "W2", "u")  # the model's parameters; u: never used by the loss (its .grad stays None)

# --------------------------------------------------------------------------- the case table
#
# A case: the scaler's arguments (`scaler`), the script (a list of steps: "ok", or a poison
# "inf@W1", "-inf@b1", "nan@W2", each optionally "+clip": unscale_ and clip_grad_norm_ first),
# whether the model carries the unused parameter u, one or two param groups, max_norm.

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("overflow on the first step", "第一步就溢出",
         scaler={"growth_interval": 2}, script=["inf@W1", "ok", "ok", "ok", "ok"], unused=False, groups=1),
    edge("NaN, not inf", "是 NaN 而不是 inf",
         scaler={"growth_interval": 2}, script=["ok", "nan@W2", "ok", "ok"], unused=False, groups=1),
    edge("unscale_, then clip, then step", "先 unscale_，再裁剪，再 step",
         scaler={"init_scale": 1024.0, "growth_interval": 2},
         script=["ok+clip", "inf@b1+clip", "ok+clip", "ok+clip", "ok"], unused=False, groups=1),
    edge("growth exactly at growth_interval, and a reset by an overflow", "恰好在 growth_interval 处增长，溢出时清零",
         scaler={"init_scale": 256.0, "growth_interval": 3},
         script=["ok", "ok", "ok", "ok", "-inf@W2", "ok", "ok", "ok"], unused=False, groups=1),
    edge("overflows in a row", "连续溢出",
         scaler={"init_scale": 1024.0, "growth_interval": 2}, script=["inf@W1", "nan@b1", "-inf@W2", "ok", "ok"],
         unused=False, groups=1),
    edge("params without grad", "没有梯度的参数",
         scaler={"init_scale": 4096.0, "growth_interval": 1}, script=["ok", "nan@W1", "ok+clip", "ok"],
         unused=True, groups=1),
    edge("two param groups", "两个参数组",
         scaler={"init_scale": 64.0, "growth_interval": 2}, script=["ok", "ok", "inf@W2", "ok+clip"],
         unused=True, groups=2),
    edge("factors other than 2 and 0.5, growth_interval 1", "2 和 0.5 以外的因子，growth_interval 为 1",
         scaler={"init_scale": 1000.0, "growth_factor": 1.5, "backoff_factor": 0.7, "growth_interval": 1},
         script=["ok", "inf@b1", "ok", "ok", "nan@W1", "ok"], unused=False, groups=1),
    edge("disabled: a pass-through", "禁用时原样透传",
         scaler={"init_scale": 1024.0, "growth_interval": 1, "enabled": False}, script=["ok", "ok+clip", "ok"],
         unused=True, groups=1),
)
# fmt: on

POISONS = ("inf", "-inf", "nan")


def draws(rng, count: int) -> list[dict]:
    """Random scalers (a power of two or not, factors 1.5 to 4 and 0.25 to 0.7, interval 1 to
    3) and scripts of 5 to 8 steps: about half clean, the rest inf, -inf or NaN in a random
    parameter, some unscaled and clipped by hand; the unused parameter and a second group either way."""
    cases = []
    for _ in range(count):
        scaler = {
            "init_scale": rng.choice((1.0, 16.0, 1024.0, 65536.0, 1000.0, 3.0)),
            "growth_factor": rng.choice((2.0, 2.0, 1.5, 4.0)),
            "backoff_factor": rng.choice((0.5, 0.5, 0.25, 0.7)),
            "growth_interval": rng.randint(1, 3),
        }
        script = []
        for _ in range(rng.randint(5, 8)):
            step = "ok" if rng.random() < 0.5 else f"{rng.choice(POISONS)}@{rng.choice(NAMES[:3])}"
            script.append(step + ("+clip" if rng.random() < 0.3 else ""))
        cases.append({"scaler": scaler, "script": script, "unused": rng.random() < 0.5, "groups": rng.randint(1, 2)})
    return cases


CASES = CaseTable(draw=draws, edges=EDGES, draws=3)


def powers_of_two(case):
    """The case with every scale a power of two (the float64 rule's runs: exact in every method)."""
    scaler = dict(case["scaler"])
    scaler["init_scale"] = 2.0 ** round(torch.log2(torch.tensor(scaler.get("init_scale", 2.0**16))).item())
    scaler["growth_factor"] = 2.0 if scaler.get("growth_factor", 2.0) < 3 else 4.0
    scaler["backoff_factor"] = 0.5 if scaler.get("backoff_factor", 0.5) >= 0.5 else 0.25
    return case | {"scaler": scaler}


# --------------------------------------------------------------------------- the story's data


def recipe(gen, case, dtype, *, note=False, resume=None) -> dict:
    """Plain data for the story: the parameters (in `dtype`), the data, the groups, the script
    parsed (poison: (kind, parameter, flat index) or None; clip: max_norm or None)."""
    params = [
        randn(gen, I, H, dtype=dtype, std=0.5),
        randn(gen, H, dtype=dtype, std=0.5),
        randn(gen, H, 1, dtype=dtype, std=0.5),
        randn(gen, 3, dtype=dtype),
    ][: 4 if case["unused"] else 3]
    script = []
    for text in case["script"]:
        what, _, clip = text.partition("+")
        poison = None
        if what != "ok":
            kind, _, name = what.partition("@")
            index = NAMES.index(name)
            poison = (kind, index, int(torch.randint(params[index].numel(), (1,), generator=gen)))
        script.append({"poison": poison, "clip": 0.25 if clip else None, "text": text})
    groups = [(list(range(len(params))), 0.1)]
    if case["groups"] == 2:
        groups = [([0, 1], 0.1), ([2, 3][: len(params) - 2], 0.05)]
    return {
        "params": params,
        "x": randn(gen, N, I, dtype=dtype),
        "t": randn(gen, N, 1, dtype=dtype),
        "groups": groups,
        "scaler": dict(case["scaler"]),
        "script": script,
        "note": note,
        "resume": resume,
    }


def in_float64(made: dict) -> dict:
    return made | {
        "params": [p.double() for p in made["params"]],
        "x": made["x"].double(),
        "t": made["t"].double(),
    }


def story_text(made: dict) -> str:
    """How the story looked: the scaler's call and the script, as code."""
    script = ", ".join(step["text"] for step in made["script"])
    return f"{call_repr('LossScaler', **made['scaler'])} `[{script}]`"


# --------------------------------------------------------------------------- the story (runs where the kata lives)


class CountingSGD(torch.optim.SGD):
    """SGD that counts its steps and returns its `note` (what step(*args, **kwargs) passes on)."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self.calls = 0

    def step(self, closure=None, *, note=None):
        super().step(closure)
        self.calls += 1
        return note


def forward(params, x, t):
    """(the loss, L: the size of what it sums before cancelling, for its tolerance)."""
    prediction = torch.tanh(x @ params[0] + params[1]) @ params[2]
    size = ((prediction.detach().abs() + t.abs()) ** 2).mean()
    return ((prediction - t) ** 2).mean(), float(size)


def number(value):
    """A number as a Python float (a 0-d tensor included), an int as it is; anything else as its repr."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return repr(value)


def numbers(state):
    if not isinstance(state, dict):
        return repr(state)
    return {str(key): number(value) for key, value in state.items()}


def gradients(params) -> list:
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


@scenario
def played(kata, made: dict) -> dict:
    """The story (module docstring) with kata.LossScaler(**made["scaler"]): its trace, a dict per
    step; a step that raised ends it (trace["raised"]: the step and the error). With a resume
    {"at": k, "state": dict or None}, before step k a new LossScaler(same arguments) loads
    `state` (None: the old scaler's state_dict()) and takes over."""
    params = [torch.nn.Parameter(p.clone()) for p in made["params"]]
    groups = [{"params": [params[i] for i in indices], "lr": lr} for indices, lr in made["groups"]]
    optimizer = CountingSGD(groups, lr=0.1, momentum=MOMENTUM)
    trace = {"steps": [], "raised": None}
    try:
        scaler = kata.LossScaler(**made["scaler"])
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the judge says what was raised
        trace["raised"] = (0, f"{type(error).__name__}: {error}")
        return trace
    for number_, step in enumerate(made["script"], 1):
        seen = {}
        trace["steps"].append(seen)
        try:
            resume = made["resume"]
            if resume is not None and number_ == resume["at"]:
                state = scaler.state_dict() if resume["state"] is None else resume["state"]
                scaler = kata.LossScaler(**made["scaler"])
                scaler.load_state_dict(state)
            optimizer.zero_grad(set_to_none=True)
            loss, seen["size"] = forward(params, made["x"], made["t"])
            scaled = scaler.scale(loss)
            seen["scaled loss"] = scaled.detach().clone() if isinstance(scaled, torch.Tensor) else repr(scaled)
            scaled.backward()
            if step["poison"] is not None:
                kind, index, where = step["poison"]
                with torch.no_grad():
                    params[index].grad.view(-1)[where] = float(kind)
            if step["clip"] is not None:
                scaler.unscale_(optimizer)
                seen["scale after unscale_"] = number(scaler.get_scale())
                seen["grads after unscale_"] = gradients(params)
                torch.nn.utils.clip_grad_norm_(params, step["clip"])
            before = optimizer.calls
            returned = scaler.step(optimizer, note=f"step {number_}") if made["note"] else scaler.step(optimizer)
            seen["returned"] = repr(returned)
            seen["stepped"] = optimizer.calls - before
            seen["grads after step"] = gradients(params)
            seen["params"] = [p.detach().clone() for p in params]
            seen["scale after step"] = number(scaler.get_scale())
            scaler.update()
            seen["scale after update"] = number(scaler.get_scale())
            seen["state"] = numbers(scaler.state_dict())
        except (NotImplementedError, ForbiddenCallError):
            raise
        except Exception as error:  # noqa: BLE001 - the judge says what was raised, and where
            trace["raised"] = (number_, f"{type(error).__name__}: {error}")
            break
    return trace


# GradScaler("cpu") in the learner's place: the twin's implementation (here only: the kata
# process has it removed).
REFERENCE = types.SimpleNamespace(LossScaler=functools.partial(torch.amp.GradScaler, "cpu"))


def twin(made: dict) -> dict:
    """The expected trace: the same story in float64, GradScaler driving it."""
    return played(REFERENCE, in_float64(made))


# --------------------------------------------------------------------------- observations, in the story's order

# kind -> (what it is at step k, its Chinese twin, what a mismatch most often means, its Chinese twin)
KINDS = {
    "raised": ("what the story raised", "故事中抛出的异常", "", ""),
    "scaled loss": (
        "scale(loss) at step {k}",
        "第 {k} 步 scale(loss) 的结果",
        "scale(loss) is loss * the current scale (the loss itself when disabled)",
        "scale(loss) 是 loss 乘以当前的 scale（禁用时原样返回 loss）",
    ),
    "scale after unscale_": (
        "get_scale() after unscale_() at step {k}",
        "第 {k} 步 unscale_() 之后的 get_scale()",
        "unscale_() never changes the scale: only update() does",
        "unscale_() 从不改变 scale：只有 update() 改变它",
    ),
    "grads after unscale_": (
        "gradients after unscale_() at step {k}",
        "第 {k} 步 unscale_() 之后的梯度",
        "unscale_() multiplies every gradient of every param group by 1 / scale, in place",
        "unscale_() 把每个参数组里的每个梯度原地乘以 1 / scale",
    ),
    "stepped": (
        "optimizer.step() calls in step() at step {k}",
        "第 {k} 步 step() 中 optimizer.step() 的调用次数",
        "step() calls optimizer.step() once when every gradient is finite, and never when one holds inf, -inf "
        "or NaN (torch.isfinite catches all three); update() clears that record for the next step",
        "所有梯度都有限时 step() 调用一次 optimizer.step()；只要有一个梯度含 inf、-inf 或 NaN 就一次也不调用"
        "（torch.isfinite 三者都能发现）；update() 会清掉这一步的记录",
    ),
    "grads after step": (
        "gradients after step() at step {k}",
        "第 {k} 步 step() 之后的梯度",
        "step() unscales the gradients (multiplies them by 1 / scale) unless unscale_() already did in this step: "
        "never twice",
        "step() 会反缩放梯度（乘以 1 / scale），除非这一步已经调用过 unscale_()：绝不能做两次",
    ),
    "params": (
        "parameters after step() at step {k}",
        "第 {k} 步 step() 之后的参数",
        "the optimizer steps on the unscaled gradients, and only when they are all finite",
        "优化器用反缩放后的梯度更新参数，且只在梯度全部有限时更新",
    ),
    "scale after step": (
        "get_scale() after step() at step {k}",
        "第 {k} 步 step() 之后的 get_scale()",
        "step() never changes the scale: update() does, once per step",
        "step() 从不改变 scale：由 update() 改变，每步一次",
    ),
    "scale after update": (
        "get_scale() after update() at step {k}",
        "第 {k} 步 update() 之后的 get_scale()",
        "update(): after an overflow scale *= backoff_factor; when growth_interval clean steps in a row are "
        "counted, scale *= growth_factor",
        "update()：溢出后 scale *= backoff_factor；连续 growth_interval 个无溢出的步之后 scale *= growth_factor",
    ),
    "tracker": (
        "state_dict()['_growth_tracker'] after update() at step {k}",
        "第 {k} 步 update() 之后的 state_dict()['_growth_tracker']",
        "_growth_tracker counts the clean steps since the last overflow or growth: an overflow and a growth "
        "both set it back to 0",
        "_growth_tracker 记录自上次溢出或增长以来无溢出的步数：溢出和增长都把它清零",
    ),
    "state scale": (
        "state_dict()['scale'] after update() at step {k}",
        "第 {k} 步 update() 之后的 state_dict()['scale']",
        "state_dict()['scale'] is the current scale",
        "state_dict()['scale'] 就是当前的 scale",
    ),
    "returned": (
        "what step() returned at step {k}",
        "第 {k} 步 step() 的返回值",
        "step() returns what optimizer.step(*args, **kwargs) returns (its arguments passed on), and None when "
        "it skips the step",
        "step() 返回 optimizer.step(*args, **kwargs) 的返回值（参数原样传下去），跳过这一步时返回 None",
    ),
}


def key(kind: str, k: int = 0) -> str:
    """What an observation is called, in the learner's language (the diagnosis matches by it)."""
    english, chinese, _, _ = KINDS[kind]
    return pick(english, chinese).format(k=k)


def hint(kind: str) -> str:
    return pick(KINDS[kind][2], KINDS[kind][3])


def flat(values: list, like: list) -> torch.Tensor | str:
    """The tensors of `values` where `like` has one, flattened into one float64 vector (a missing
    gradient reads as NaN); a value that is no tensor list as its repr."""
    if not isinstance(values, list) or len(values) != len(like):
        return repr(values)
    parts = []
    for value, want in zip(values, like):
        if want is None:
            continue
        if not isinstance(value, torch.Tensor) or value.shape != want.shape:
            parts.append(torch.full((want.numel(),), float("nan"), dtype=torch.float64))
        else:
            parts.append(value.detach().double().reshape(-1))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def as_tensor(value):
    """A Python number as a float64 tensor (compared within a tolerance); the rest as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value, dtype=torch.float64)
    return value


def observations(trace: dict, want: dict, kinds: tuple) -> dict:
    """{key: value} of `trace`, for the observations `want` (the twin's trace) has, of `kinds`,
    in the story's order; a step that raised ends them, under the key of "raised"."""
    found = {}
    for k, (seen, expected) in enumerate(zip(trace["steps"], want["steps"]), 1):
        for kind in kinds:
            name = {"tracker": "state", "state scale": "state"}.get(kind, kind)
            if name not in expected or name not in seen:
                continue
            if name.startswith("grads") and not finite(expected, name):
                continue  # a poisoned step's gradients: inf or NaN, unscaled or not (undefined)
            if name == "state" and not expected[name]:
                continue  # a disabled scaler's state_dict(): not judged
            value = seen[name]
            if kind in ("grads after unscale_", "grads after step", "params"):
                value = flat(value, expected[name])
            elif kind in ("tracker", "state scale"):
                field = "_growth_tracker" if kind == "tracker" else "scale"
                value = value.get(field, pick("no such key", "没有这个键")) if isinstance(value, dict) else value
                if kind == "tracker" and isinstance(value, (int, float)) and float(value).is_integer():
                    value = torch.tensor(int(value))
            elif kind == "stepped":
                value = torch.tensor(value)
            elif kind == "scaled loss" and isinstance(value, torch.Tensor):
                value = value.detach().double()  # its dtype is not judged: loss * scale may promote
            found[key(kind, k)] = as_tensor(value)
    if trace["raised"] is not None:
        step, error = trace["raised"]
        found[key("raised")] = pick(f"at step {step}: {error}", f"第 {step} 步：{error}")
    return found


CORE_KINDS = (
    "scaled loss",
    "scale after unscale_",
    "grads after unscale_",
    "stepped",
    "grads after step",
    "params",
    "scale after step",
    "scale after update",
    "tracker",
    "state scale",
)


def finite(step: dict, name: str) -> bool:
    return all(g is None or bool(torch.isfinite(g).all()) for g in step[name])


def tolerances(made: dict, want: dict, dtype, *, float64_throughout=False) -> dict:
    """{key: (rtol, atol)} of every observation compared with a tolerance (module docstring);
    the gradients of a poisoned step are not compared (they hold inf or NaN, and GradScaler
    leaves them half unscaled or not at all: undefined)."""
    eps = torch.finfo(core_dtype(dtype, float64_throughout)).eps
    scale_tolerance = {"rtol": SCALE_RTOL, "atol": 0.0}
    lr = max(lr for _, lr in made["groups"])
    found, moved = {}, 0.0
    for k, step in enumerate(want["steps"], 1):
        scale = step["scale after step"]
        found[key("scaled loss", k)] = {"rtol": ROUND * eps + SCALE_RTOL, "atol": SHIFT * eps * scale * step["size"]}
        for name in ("grads after unscale_", "grads after step"):
            if name in step and finite(step, name):
                largest = max(float(g.abs().max()) for g in step[name] if g is not None)
                # k: the parameters they are taken at drift from the twin's by one rounding a step
                found[key(name, k)] = {"rtol": ROUND * eps + HALF_ULP32, "atol": SHIFT * eps * largest * k}
        if step["stepped"] and finite(step, "grads after step"):
            moved += 2 * lr * max(float(g.abs().max()) for g in step["grads after step"] if g is not None)
        largest = max(float(p.abs().max()) for p in step["params"])
        found[key("params", k)] = {"rtol": ROUND * eps, "atol": SHIFT * eps * (largest + moved)}
        for name in ("scale after unscale_", "scale after step", "scale after update", "state scale"):
            found[key(name, k)] = scale_tolerance
    return found


EXACTLY = ("stepped", "tracker", "returned", "raised")


def judge_story(kata, made: dict, *, kinds=CORE_KINDS, float64_throughout=False, want=None, sizes=None) -> None:
    """The learner's story against the twin's (or `want`), observation by observation in the
    story's order, inside a diagnosis that replays the story on every known slip."""
    want = twin(made) if want is None else want
    dtype = made["params"][0].dtype
    expected = observations(want, want, kinds)
    allowed = tolerances(made, want, dtype, float64_throughout=float64_throughout)
    text = story_text(made)
    kind_of = {key(kind, k): kind for kind in kinds for k in range(1, len(made["script"]) + 1)}

    def replay(implementation) -> dict:
        return observations(played(implementation, made), want, kinds)

    with SPEC.diagnosing(replay, sizes or {}):
        got = replay(kata)
        raised = got.get(key("raised"))
        for what, value in expected.items():
            if what not in got:
                raise Mismatch(
                    pick(f"{text} raised {raised}", f"{text} 抛出了异常，{raised}"),
                    what=key("raised"),
                    actual=raised,
                    expected=None,
                )
            kind = kind_of[what]
            if what in allowed and kind not in EXACTLY:
                assert_close(got[what], value, call=text, what=what, tolerance=allowed[what], hint=hint(kind))
            elif not same(got[what], value):
                raise Mismatch(
                    pick(
                        f"{text}: {what} is {shown(got[what])}; expected {shown(value)}. {hint(kind)}",
                        f"{text}：{what} 为 {shown(got[what])}；应为 {shown(value)}。{hint(kind)}",
                    ),
                    what=what,
                    actual=got[what],
                    expected=value,
                )


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.equal(a.double(), b.double())
    return type(a) is type(b) and a == b


def shown(value) -> str:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return str(value.item())
    return str(value)


# --------------------------------------------------------------------------- the benchmark


class NoStep(torch.optim.Optimizer):
    """An optimizer whose step does nothing: the benchmark times the scaler's own work."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def benchmark(kata, device):
    """(kata call, reference call): one scaler step (scale, unscale_ with its inf check, step,
    update) over 16 gradients of 256 x 256 (1M float32 values; every 4th call an inf in one,
    so both branches run), against torch.amp.GradScaler. Both restore the gradients first."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(randn(gen, 256, 256, device=device)) for _ in range(16)]
    saved = [randn(gen, 256, 256, device=device, std=1024.0) for _ in params]
    for p, g in zip(params, saved):
        p.grad = g.clone()
    optimizer, loss = NoStep(params), torch.tensor(1.5, device=device)

    def timed(make):
        made, calls = [], [0]

        def call():
            if not made:
                made.append(make())
            scaler = made[0]
            for p, g in zip(params, saved):
                p.grad.copy_(g)
            calls[0] += 1
            if calls[0] % 4 == 0:
                params[3].grad[0, 0] = float("inf")
            scaler.scale(loss)
            scaler.step(optimizer)
            scaler.update()

        return call

    device_type = torch.device(device).type
    kata_call = timed(lambda: kata.LossScaler(init_scale=1024.0, growth_interval=3))
    reference_call = timed(lambda: torch.amp.GradScaler(device_type, init_scale=1024.0, growth_interval=3))
    return kata_call, reference_call


SPEC = KataSpec(
    kata="loss_scaler",
    symbol="LossScaler",
    reference=(
        'torch.amp.GradScaler("cpu", same arguments) driving SGD on a float64 twin of the model, in lockstep, '
        "inf, -inf and NaN injected into chosen gradients at chosen steps"
    ),
    forbidden=LOSS_SCALING,
    tolerances=per_dtype(
        float64=(ROUND * torch.finfo(torch.float64).eps, SHIFT * torch.finfo(torch.float64).eps),
        float32=(ROUND * torch.finfo(torch.float32).eps, SHIFT * torch.finfo(torch.float32).eps),
    ),
    tolerance_note=(
        "shown for parameters and gradients up to 1: atol scales with the largest parameter plus the steps taken "
        "(gradients: the largest gradient); scales within 2**-20 relative (GradScaler's is float32); step counts "
        "and the growth tracker exactly: the solution and variants measured at most 0.33 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)

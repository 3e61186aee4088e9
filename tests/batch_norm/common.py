"""batch_norm's shared part: the case table, the scenarios (one story each), the references, the tolerances, the checks and the SPEC.

A BatchNorm is stateful, so each case is one story, one scenario: the learner's module is
built, random weight, bias and buffers (running_mean, running_var, num_batches_tracked) are
copied in by name, then it is called by a script of modes (train x3, eval x1, train x1 by
default). The trace holds, after each call, the output, the gradients autograd gives x,
weight and bias (the output dotted with a random upstream), the buffers, whether they carry
autograd history, and the state_dict keys. PyTorch's module, built in float64 with the same
values (rounded to the module's dtype), plays the same script; each call is compared inside
a diagnosis that replays the story on the known slips and takes the same call of their trace.

Inputs have a different mean and scale per channel (offsets of about 1.5, scales from 0.4 to
2.7), so statistics over the wrong dims are far off. A constant channel has its value 2.5,
whose sums and means are exact in every dtype: its variance is exactly 0 and eps decides.

Tolerances: see `tolerance` below, the measured figures above it.
"""

import math

import torch
from torch import nn

from judge.forbidden import BATCH_NORM, check_structure
from judge.language import pick, tr
from judge.testing.checks import assert_close, describe
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.modules import module_repr
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases run in it
HALF = (torch.float16, torch.bfloat16)
TRAIN, EVAL = "train", "eval"
SCRIPT = (TRAIN, TRAIN, TRAIN, EVAL, TRAIN)
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
DEFAULTS = {"eps": 1e-5, "momentum": 0.1, "affine": True, "track_running_stats": True}
CONSTANT = 2.5  # the constant channel's value: n copies of it sum and average exactly

# --------------------------------------------------------------------------- tolerances

# (rtol, atol) for a result judged as `dtype` (float64 judged as float32 in the core tier:
# FLOAT64_RULE): rtol = ROUND * eps, atol = SHIFT * eps * max(1, max |expected|) * A. The
# output (x - mean) / std * w + b and the gradient of x, w / std * (g - mean g - xhat
# mean(g xhat)), both cancel at the scale of their largest element; x - mean is rounded at
# the scale of |x|, so A = 1 + max |x| / sqrt(var + eps) over the channels (`amplification`:
# about 10 here, 100 for the half-precision test's means of 40, 1 + 2.5 / sqrt(eps) with a
# constant channel), and the gradient of x's terms are max |w| * max |g| times larger still
# (`gradient_scale`); the buffers are averages, relative.
# Measured over 100 seeds x every case of the story tests (train x3, eval, train; every
# call's output, gradients and buffers), worst error as a fraction of the allowed one: the
# solution, the stub-only variant and tinygrad's BatchNorm2d glued to the signature
# 0.047 (float32), 0.0045 (float64 as float32), 0.016 (float64 throughout), half precision
# 0.12 (float16) and 0.13 (bfloat16). The subtlest slip (eps outside the square root) is off
# by 1e-1 of the constant channel's gradient, far outside.
ROUND = 8
SHIFT = 32
EXACTLY = {"rtol": 0.0, "atol": 0.0}


def tolerance(expected: torch.Tensor, *, float64_throughout: bool = False, amplification: float = 1.0) -> dict:
    if not expected.is_floating_point():
        return EXACTLY
    eps = torch.finfo(core_dtype(expected.dtype, float64_throughout)).eps
    scale = max(1.0, float(expected.detach().abs().max())) if expected.numel() else 1.0
    return {"rtol": ROUND * eps, "atol": SHIFT * eps * scale * amplification}


def gradient_scale(weight: torch.Tensor | None, upstream: torch.Tensor) -> float:
    """How much larger than 1 / std the terms are whose difference is the gradient of x,
    w / std * (g - mean g - xhat mean(g xhat)): max |w| * max |g|, at least 1. With 2 values per
    channel the difference is w / std * (g1 - g2) / 2 * eps / (var + eps), nearly nothing, and
    float32 leaves only the rounding of those terms (seed 904118, shape [2, 4]: a correct
    variant off by 1.1 times the tolerance that left this factor out)."""
    if not upstream.numel():
        return 1.0
    largest_weight = 1.0 if weight is None else float(weight.detach().abs().max())
    return max(1.0, largest_weight * float(upstream.detach().abs().max()))


def amplification(script: list, eps: float) -> float:
    """1 + max |x| / sqrt(var + eps) over the channels of every batch: how much x - mean, rounded
    at the scale of |x|, is magnified by the normalisation (a constant channel by 1 / sqrt(eps))."""
    worst = 0.0
    for _, x, _ in script:
        h = x.detach().cpu().double().transpose(0, 1).reshape(x.size(1), -1)
        std = (h.var(dim=1, correction=0) + eps).sqrt()
        worst = max(worst, float((h.abs().amax(dim=1) / std).max()))
    return 1.0 + worst


# --------------------------------------------------------------------------- the case table

# shape [N, C, *]; momentum (None: the cumulative average); eps; affine; track
# (track_running_stats); script (the modes of the calls); fresh (True: the buffers are left as
# a new module has them, nothing copied in); constant (channel 1 holds one value); count
# (num_batches_tracked copied in).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("image batch [3, 4, 5, 2]: statistics over N, H and W", "图像批次 [3, 4, 5, 2]：统计量在 N、H、W 上计算",
         shape=[3, 4, 5, 2], momentum=0.3, eps=1e-5, affine=True, track=True, script=SCRIPT, fresh=False,
         constant=False, count=2),
    edge("momentum None: a cumulative average over 4 batches", "momentum 为 None：4 个批次的累积平均",
         shape=[4, 3, 6], momentum=None, eps=1e-5, affine=True, track=True, script=SCRIPT, fresh=False,
         constant=False, count=0),
    edge("N=1 with length [1, 3, 5]: 5 values per channel", "N=1 但有长度 [1, 3, 5]：每个通道 5 个值",
         shape=[1, 3, 5], momentum=0.1, eps=1e-5, affine=True, track=True, script=SCRIPT, fresh=False,
         constant=False, count=5),
    edge("no running stats: batch statistics in eval too", "不跟踪运行统计量：评估时也用批统计量",
         shape=[5, 4], momentum=0.1, eps=1e-5, affine=True, track=False, script=SCRIPT, fresh=False,
         constant=False, count=0),
    edge("constant channel: variance 0, eps decides, gradients finite", "常数通道：方差为 0，由 eps 决定，梯度有限",
         shape=[4, 3, 5], momentum=0.1, eps=1e-3, affine=True, track=True, script=SCRIPT, fresh=False,
         constant=True, count=1),
    edge("eval before training: running mean 0 and variance 1", "训练前先评估：运行均值为 0，方差为 1",
         shape=[2, 3, 2, 2, 3], momentum=0.1, eps=1e-5, affine=True, track=True, script=(EVAL, TRAIN, EVAL),
         fresh=True, constant=False, count=0),
)
# fmt: on


def draws(rng, count: int) -> list[dict]:
    """Rank 2 to 5, N from 2 to 5 (1 once in a while, with a length), C from 2 to 6, spatial
    sizes 1 to 5; momentum 0.1, 0.3 or None; eps 1e-5, 1e-4 or 1e-3; affine and running
    stats most of the time; the default script."""
    cases = []
    for _ in range(count):
        rank = rng.randint(2, 5)
        spatial = [rng.randint(1, 5) for _ in range(rank - 2)]
        N = rng.randint(2, 5) if rank == 2 or rng.random() < 0.8 else 1
        if N * math.prod(spatial) < 2:
            spatial[0] = 3
        cases.append(
            {
                "shape": [N, rng.randint(2, 6), *spatial],
                "momentum": rng.choice((0.1, 0.3, None)),
                "eps": rng.choice((1e-5, 1e-4, 1e-3)),
                "affine": rng.random() < 0.8,
                "track": rng.random() < 0.8,
                "script": SCRIPT,
                "fresh": False,
                "constant": rng.random() < 0.3,
                "count": rng.randint(0, 6),
            }
        )
    return cases


CASES = CaseTable(draw=draws, edges=EDGES, draws=3)
ONE_VALUE = edge("one value per channel [1, 4]", "每个通道只有一个值 [1, 4]",
                 shape=[1, 4], momentum=0.1, eps=1e-5, affine=True, track=True, script=(TRAIN,), fresh=False,
                 constant=False, count=0)  # fmt: skip


# --------------------------------------------------------------------------- the reference and the recipe


def keywords_of(case) -> dict:
    """The learner's constructor keywords: those that differ from the defaults (so the defaults are judged too)."""
    given = {"eps": case["eps"], "momentum": case["momentum"], "affine": case["affine"]}
    given["track_running_stats"] = case["track"]
    return {k: v for k, v in given.items() if v != DEFAULTS[k] or (k == "momentum" and v is None)}


def pytorch_module(case) -> nn.Module:
    """nn.BatchNorm1d/2d/3d by rank, float64, every parameter and buffer random unless `fresh`."""
    rank = len(case["shape"])
    cls = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[rank]
    return cls(case["shape"][1], **(DEFAULTS | keywords_of(case)), dtype=torch.float64)


def build(gen, case, module_dtype, device="cpu") -> tuple[dict, nn.Module, str]:
    """(the learner's recipe, PyTorch's float64 module, how it was built): weight 1 + N(0, 0.4^2),
    bias N(0, 0.4^2), running_mean N(0, 0.5^2), running_var exp(N(0, 0.5^2)), rounded to the
    module's dtype; num_batches_tracked case["count"]. A fresh case copies no buffer."""
    reference = pytorch_module(case)
    C = case["shape"][1]
    values = {}
    if case["affine"]:
        values["weight"] = 1 + randn(gen, C, dtype=torch.float64, std=0.4)
        values["bias"] = randn(gen, C, dtype=torch.float64, std=0.4)
    if case["track"] and not case["fresh"]:
        values["running_mean"] = randn(gen, C, dtype=torch.float64, std=0.5)
        values["running_var"] = randn(gen, C, dtype=torch.float64, std=0.5).exp()
        values["num_batches_tracked"] = torch.tensor(case["count"], dtype=torch.long)
    state = {}
    with torch.no_grad():
        for name, value in values.items():
            if value.is_floating_point():
                value = value.to(module_dtype)
            getattr(reference, name).copy_(value)
            state[name] = value
    recipe = {"positional": [C], "keywords": keywords_of(case), "state": state, "dtype": module_dtype, "device": device}
    return recipe, reference, module_repr("BatchNorm", num_features=C, **recipe["keywords"]).replace("num_features=", "")


def make_input(gen, case, dtype, device="cpu", *, offset: float = 1.5) -> torch.Tensor:
    """x of case["shape"]: per channel a mean N(0, offset^2) and a scale exp(N(0, 0.5^2));
    channel 1 constant (2.5) in a constant case."""
    shape = case["shape"]
    C = shape[1]
    view = [1, C] + [1] * (len(shape) - 2)
    mean = randn(gen, C, dtype=torch.float64, std=offset).view(view)
    scale = randn(gen, C, dtype=torch.float64, std=0.5).exp().view(view)
    x = mean + scale * randn(gen, *shape, dtype=torch.float64)
    if case["constant"]:
        x[:, 1] = CONSTANT
    return x.to(dtype=dtype, device=device)


def make_script(gen, case, dtype, device="cpu", *, offset: float = 1.5) -> list:
    """[(mode, x, upstream)] for the case's script: a new batch each call."""
    return [
        (mode, make_input(gen, case, dtype, device, offset=offset), randn(gen, *case["shape"], dtype=dtype, device=device))
        for mode in case["script"]
    ]


def reference_story(reference: nn.Module, script: list, module_dtype) -> list[dict]:
    """PyTorch's module through the script in float64: each call's output (in x's dtype), the
    gradients (x's in x's dtype, weight's and bias's in the module's), and the buffers (in the
    module's dtype, num_batches_tracked long); {"raised": message} where it raised."""
    calls = []
    for mode, x, upstream in script:
        reference.train(mode == TRAIN)
        leaf = x.detach().cpu().double().requires_grad_()
        try:
            out = reference(leaf)
        except ValueError as error:
            calls.append({"raised": str(error)})
            continue
        params = [p for p in (reference.weight, reference.bias) if p is not None]
        grads = torch.autograd.grad(out, [leaf, *params], upstream.detach().cpu().double())
        step = {"output": out.detach().to(x.dtype), "the gradient of `x`": grads[0].to(x.dtype)}
        for name, grad in zip(("weight", "bias"), grads[1:]):
            step[f"the gradient of `{name}`"] = grad.to(module_dtype)
        for name in BUFFERS:
            value = getattr(reference, name)
            if value is not None:
                step[name] = value.detach().clone().to(module_dtype if value.is_floating_point() else torch.long)
        calls.append(step)
    return calls


# --------------------------------------------------------------------------- scenarios (run where the kata lives)

MISSING = "<missing>"


def kind_of(value) -> str:
    return MISSING if value is MISSING else type(value).__name__


@scenario
def story(kata, recipe: dict, script: list, differentiate: bool = True) -> dict:
    """The learner's BatchNorm built from the recipe (the values copied into its attributes by
    name), then called once per (mode, x, upstream) of the script. Each call's trace: the
    output, the gradients of x, weight and bias (when `differentiate`), the buffers (copies),
    their autograd history, the state_dict keys and x as the call left it; {"raised": message}
    for a ValueError."""
    module = kata.BatchNorm(*recipe["positional"], **recipe["keywords"]).to(recipe["dtype"])
    check_structure(module)
    with torch.no_grad():
        for name, value in recipe["state"].items():
            target = getattr(module, name, MISSING)
            if not isinstance(target, torch.Tensor) or list(target.shape) != list(value.shape):
                return {"problem": (name, kind_of(target), list(target.shape) if isinstance(target, torch.Tensor) else None)}
            target.copy_(value)
    module.to(recipe["device"])
    calls = []
    for mode, x, upstream in script:
        module.train(mode == TRAIN)
        leaf = x.detach().requires_grad_() if differentiate else x
        try:
            out = module(leaf)
        except ValueError as error:
            calls.append({"raised": str(error)})
            continue
        step = {"output": out.detach() if isinstance(out, torch.Tensor) else out, "x": leaf.detach()}
        if differentiate:
            wrt = {"x": leaf}
            for name in ("weight", "bias"):
                p = getattr(module, name, None)
                if isinstance(p, torch.Tensor) and p.requires_grad:
                    wrt[name] = p
            grads = {}
            if isinstance(out, torch.Tensor) and out.requires_grad:
                found = torch.autograd.grad(out, list(wrt.values()), upstream, allow_unused=True)
                grads = dict(zip(wrt, found))
            step["grads"] = grads
        for name in BUFFERS:
            value = getattr(module, name, MISSING)
            if isinstance(value, torch.Tensor):
                step[name] = value.detach().clone()
                step[f"{name} history"] = (value.requires_grad, value.grad_fn is not None)
            else:
                step[name] = kind_of(value)
        step["state_dict"] = sorted(module.state_dict().keys())
        calls.append(step)
    return {"calls": calls}


@scenario
def new_module(kata, positional: list, keywords: dict) -> dict:
    """A new BatchNorm's parameters and buffers (names, kinds, values) and its state_dict keys."""
    module = kata.BatchNorm(*positional, **keywords)
    found = {"parameters": sorted(name for name, _ in module.named_parameters())}
    for name in ("weight", "bias", *BUFFERS):
        value = getattr(module, name, MISSING)
        found[name] = (kind_of(value), value.detach().clone() if isinstance(value, torch.Tensor) else None)
    found["state_dict"] = sorted(module.state_dict().keys())
    return found


# --------------------------------------------------------------------------- the judging process's side


def mode_text(mode: str) -> str:
    return f".{mode}()"


def call_text(name: str, number: int, total: int, mode: str, x) -> str:
    text = f"{name}{mode_text(mode)}({describe(x)})"
    return pick(f"call {number} of {total}, {text}", f"第 {number}/{total} 次调用 {text}")


HINTS = {
    "output": pick(
        "y = (x - mean) / sqrt(var + eps) * weight + bias, per channel over every dim but 1 with the BIASED "
        "variance in training (and without running stats), with running_mean and running_var in eval",
        "y = (x - mean) / sqrt(var + eps) * weight + bias：训练时（以及不跟踪运行统计量时）按通道在除 1 以外的所有维度上"
        "求均值与有偏方差，评估时用 running_mean 与 running_var",
    ),
    "running_mean": pick(
        "after a training call running_mean = (1 - f) * running_mean + f * mean, f = momentum (the NEW batch's "
        "weight) or 1 / num_batches_tracked when momentum is None; eval leaves it alone",
        "训练调用之后 running_mean = (1 - f) * running_mean + f * mean，f = momentum（新批次的权重），momentum 为 None 时 "
        "f = 1 / num_batches_tracked；评估时不变",
    ),
    "running_var": pick(
        "after a training call running_var = (1 - f) * running_var + f * var * n / (n - 1): the UNBIASED batch "
        "variance goes into the running average; eval leaves it alone",
        "训练调用之后 running_var = (1 - f) * running_var + f * var * n / (n - 1)：进入运行平均的是无偏的批方差；评估时不变",
    ),
    "num_batches_tracked": pick(
        "num_batches_tracked counts the training calls (+1 before the factor f is taken); eval leaves it alone",
        "num_batches_tracked 统计训练调用次数（先加 1 再计算 f）；评估时不变",
    ),
}


def problem_text(name: str, problem) -> str:
    what, kind, shape = problem
    return pick(
        f"{name}.{what} is {kind}{'' if shape is None else f' of shape {shape}'}; the grader copies a tensor of "
        f"PyTorch's shape into it (by name, as nn.BatchNorm names it)",
        f"{name}.{what} 是 {kind}{'' if shape is None else f'，形状为 {shape}'}；评测会按名字（与 nn.BatchNorm 相同）"
        f"把 PyTorch 形状的张量复制进去",
    )


def form_checked(trace: dict, name: str, number: int, expected: dict, text: str) -> dict:
    """Call `number`'s trace as {what: value}, after the checks of its form (a problem building
    the module, a raise where PyTorch returns, no gradient), each an AssertionError whose text a
    replay on a slip reproduces."""
    if "problem" in trace:
        raise AssertionError(problem_text(name, trace["problem"]))
    got = trace["calls"][number]
    if "raised" in got and "raised" not in expected:
        raise AssertionError(
            pick(
                f"{text} raised ValueError: {got['raised']}; nn.BatchNorm returns normally here",
                f"{text} 抛出了 ValueError: {got['raised']}；nn.BatchNorm 在这里正常返回",
            )
        )
    if "raised" in expected:
        if "raised" not in got:
            raise AssertionError(
                pick(
                    f"{text} returned normally; expected ValueError (one value per channel: {expected['raised']})",
                    f"{text} 正常返回了；应抛出 ValueError（每个通道只有一个值：{expected['raised']}）",
                )
            )
        return {}
    values = {"output": got["output"]}
    grads = got.get("grads")
    for what in expected:
        if what.startswith("the gradient of") and grads is not None:
            key = what.split("`")[1]
            if grads.get(key) is None:
                raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text + ".backward", name=key))
            values[what] = grads[key]
    for buffer in BUFFERS:
        if buffer in expected:
            value = got[buffer]
            if not isinstance(value, torch.Tensor):
                raise AssertionError(
                    pick(
                        f"after {text}, self.{buffer} is {value}; expected a tensor (a buffer, as nn.BatchNorm's)",
                        f"{text} 之后，self.{buffer} 是 {value}；应为张量（与 nn.BatchNorm 一样的缓冲区）",
                    )
                )
            values[buffer] = value
    return values


def judge_story(kata, gen, case, dtype, *, module_dtype=None, device="cpu", float64_throughout=False, offset=1.5):
    """One case's story in the kata process, compared call by call with PyTorch's (see the module docstring)."""
    module_dtype = module_dtype or dtype
    recipe, reference, name = build(gen, case, module_dtype, device)
    script = make_script(gen, case, dtype, device, offset=offset)
    want = reference_story(reference, script, module_dtype)
    sizes = {"N": case["shape"][0], "C": case["shape"][1]}
    with diagnosing(SPEC.kata, lambda implementation: story(implementation, recipe, script), sizes):
        trace = story(kata, recipe, script)  # an error raised on the way is matched with the slips' own
    total, magnified = len(script), amplification(script, case["eps"])
    for number, (mode, x, upstream) in enumerate(script):
        expected = want[number]
        text = call_text(name, number + 1, total, mode, x)

        def replay(implementation, number=number, expected=expected, text=text) -> dict:
            again = trace if implementation is kata else story(implementation, recipe, script)
            return form_checked(again, name, number, expected, text)

        with diagnosing(SPEC.kata, replay, sizes):
            got = replay(kata)
            for what, value in expected.items():
                if what == "raised":
                    continue
                mine = got[what]
                if what in BUFFERS and isinstance(mine, torch.Tensor) and not float64_throughout:
                    mine = mine.to(value.dtype)  # core: the values; their dtype is a convention
                where = (text + ".backward") if what.startswith("the gradient") else text
                if what in BUFFERS:
                    where = pick(f"after {text}, self", f"{text} 之后，self")
                factor = magnified
                if what == "the gradient of `x`":
                    factor *= gradient_scale(reference.weight, upstream)
                allowed = tolerance(value, float64_throughout=float64_throughout, amplification=factor)
                hint = HINTS.get(what, HINTS["output"] if what.startswith("the gradient") else "")
                assert_close(mine, value, call=where, what=what, tolerance=allowed, hint=hint)


def benchmark(kata, device):
    """(kata call, reference call): a training forward of a conv net's activations, batch 16,
    64 channels, 32 x 32, float32, against nn.BatchNorm2d(64) (both update their running stats)."""
    gen = torch.Generator().manual_seed(0)
    reference = nn.BatchNorm2d(64, device=device).train()
    module = kata.BatchNorm(64).to(device).train()
    x = randn(gen, 16, 64, 32, 32, device=device)
    return (lambda: module(x)), (lambda: reference(x))


SPEC = KataSpec(
    kata="batch_norm",
    symbol="BatchNorm",
    reference="nn.BatchNorm1d/2d/3d by rank in float64, random weight, bias and buffers copied in; train x3, eval, train",
    forbidden=BATCH_NORM,
    tolerances={dtype: {"rtol": ROUND * torch.finfo(dtype).eps, "atol": SHIFT * torch.finfo(dtype).eps} for dtype in (*FULL, *HALF)},
    tolerance_note=(
        "shown for results up to 1 in size: atol scales with the largest expected element (the output and the "
        "gradient of x cancel at that scale); the solution and variants measured at most 0.13 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)

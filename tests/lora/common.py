"""lora: what its tests share: the SPEC, the case table, the float64 reference, the
tolerances, the recipes and the scenarios that build the learner's module where the kata
lives.

PyTorch has no LoRA, so the reference (`Reference` below) is an nn.Linear `base` in float64
with two float64 Parameters beside it, under the kata's names: forward(x) =
base(x) + (x @ lora_A.T @ lora_B.T) * scaling, scaling = alpha / r computed here (alpha None:
1.0). Every parameter is random (modules.randomise_: base.weight and lora_A N(0, 1/in),
lora_B N(0, 1/r), base.bias N(0, 0.4^2)), rounded to the dtype under test and copied by name
into the learner's module: lora_B starts at zero, so a test that only ran the fresh module
would miss most slips.

The learner's LoRALinear takes an nn.Linear, which is no data: a recipe (plain data: the
sizes, the constructor's keywords, base's weights, lora_A and lora_B, dtype, device, mode and
the seed its initialisation draws from) goes where the kata lives, and a scenario builds there
a fresh nn.Linear from it, wraps it and plays the test's story. Every implementation draws its
initialisation from the same seed, so a known slip replayed for the diagnosis draws what the
learner's would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from judge.forbidden import NONE
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import Mismatch, assert_close, call_repr, check_tensor_kind, describe
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge

FULL = [torch.float64, torch.float32]  # float64 first: the edge cases run in it, and show first
HALF = [torch.float16, torch.bfloat16]
EXACT = {"rtol": 0.0, "atol": 0.0}
ASKS = "base (the nn.Linear passed in), lora_A [r, in_features] and lora_B [out_features, r] (nn.Parameter)"
LAYOUTS = {"lora_A": "[r, in_features]", "lora_B": "[out_features, r]"}

# Tolerances grow with the size of the terms a result adds up (as cross_entropy's and
# layer_norm's do): an output element adds |x| @ |W|.T + |b| + scaling * |x| @ |A|.T @ |B|.T, a
# merged weight |W| + scaling * |B| @ |A|, each gradient its own products (output_scale,
# weight_scale, gradient_scales): base(x) and the branch may nearly cancel, and scaling reaches
# 32, so a tolerance relative to the result alone would be unfair. atol = ROUNDING * eps * that
# scale (its largest element), rtol 0 (the scale bounds the result itself, so its own rounding
# is inside); eps is the dtype's, and float32's for a float64 result in the core tier (the
# float64 rule, spec.FLOAT64_RULE). Measured over 100 seeds x every case of the tests that use
# them (edge cases included; half precision on the random draws), on the solution and both
# variants (one F.linear with the effective weight W + scaling * B @ A, merged through .data;
# einsum with a bernoulli mask and a saved weight): the worst error in units of eps(dtype) *
# scale was float64 1.8 (outputs; gradients 1.6), float32 1.5 (outputs, merged weights;
# gradients 1.2), float16 0.78, bfloat16 0.92: at most 0.23 of ROUNDING = 8. The dropout test's
# share of zeros was at most 0.025 from p (allowed: 0.1). A slip is off by far more in every dtype.
ROUNDING = 8


def tolerance(dtype: torch.dtype, scale: float = 1.0, *, float64_throughout: bool = False) -> dict:
    """(rtol, atol) for a result of dtype whose terms add up to `scale` in magnitude: float32's
    eps for a float64 result unless float64_throughout (see spec.FLOAT64_RULE)."""
    eps = torch.finfo(core_dtype(dtype, float64_throughout)).eps
    return {"rtol": 0.0, "atol": ROUNDING * eps * scale}


# Per unit of scale, for the README's table (float64's own: its convention test's).
TOLERANCES = {
    dtype: tolerance(dtype, float64_throughout=True)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
}

# --------------------------------------------------------------------------- the case table
#
# Sizes: lead = x's leading dimensions (x is [*lead, I]), I = in_features, O = out_features,
# r the rank, alpha (None: not passed), bias (base has one), p the dropout (0: not passed).
# The core tier judges the math without dropout (p = 0, see without_dropout); the dropout
# tests (a convention) take the cases' p.

# fmt: off
EDGES = (  # the most telling first
    edge("alpha / r = 4 (r / alpha: 0.25), in != out", "alpha / r = 4（r / alpha：0.25），in_features != out_features",
         lead=(2, 3), I=6, O=9, r=3, alpha=12, bias=True, p=0.0),
    edge("alpha None: scaling 1", "alpha 为 None：scaling 为 1",
         lead=(4,), I=5, O=3, r=2, alpha=None, bias=False, p=0.3),
    edge("x one vector [in_features], r above in_features", "x 是单个向量 [in_features]，r 大于 in_features",
         lead=(), I=3, O=7, r=5, alpha=2.5, bias=True, p=0.1),
    edge("rank 1, one feature in, one out, one position", "秩为 1，输入输出各一个特征，一个位置",
         lead=(1, 1), I=1, O=1, r=1, alpha=2.0, bias=True, p=0.0),
    edge("alpha = 2r, as usual; three leading dims", "alpha = 2r（常见取法）；三个前导维度",
         lead=(2, 1, 3), I=11, O=4, r=8, alpha=16, bias=False, p=0.0),
)
# fmt: on


def draw(rng, count: int) -> list[dict]:
    """I, O, r and the leading dims all differ; alpha never equals r (scaling 1 would hide it),
    except when it is None; the first draw has r >= 2 and an explicit alpha."""
    cases = []
    for index in range(count):
        I, O = rng.sample(range(4 if index == 0 else 2, 17), 2)
        ranks = [n for n in range(2 if index == 0 else 1, min(I, O) + 1) if n not in (I, O)] or [1]
        r = rng.choice(ranks)
        lead = tuple(rng.sample([n for n in range(2, 8) if n not in (I, O, r)], (2, 1, 3, 0)[index % 4]))
        alphas = [2 * r, 4 * r, r / 2, 1, 16, 32.0]
        alpha = rng.choice([a for a in alphas if a != r] + ([] if index == 0 else [None]))
        cases.append(
            {
                "lead": lead,
                "I": I,
                "O": O,
                "r": r,
                "alpha": alpha,
                "bias": rng.random() < 0.6,
                "p": rng.choice([0.0, 0.1, 0.25]),
            }
        )
    return cases


CASES = CaseTable(draw=draw, edges=EDGES, draws=3)


def without_dropout(cases) -> list:
    """The cases with p = 0 (no dropout passed): the core tier judges the math alone."""
    return [case | {"p": 0.0} for case in cases]


def scaling_of(case) -> float:
    return (case["r"] if case["alpha"] is None else case["alpha"]) / case["r"]


def keywords_of(case) -> dict:
    """LoRALinear(base, r, [alpha=], [dropout=]): defaults left out, so they are judged."""
    keywords = {} if case["alpha"] is None else {"alpha": case["alpha"]}
    return keywords | ({"dropout": case["p"]} if case["p"] else {})


def name_of(case, dtype=torch.float32) -> str:
    """How the module was built, e.g. `LoRALinear(nn.Linear(6, 9, dtype=torch.float64), r=3, alpha=12)`."""
    base = f"{case['I']}, {case['O']}" + ("" if case["bias"] else ", bias=False")
    base += "" if dtype == torch.float32 else f", dtype={dtype}"
    extra = "".join(f", {k}={v!r}" for k, v in keywords_of(case).items())
    return f"LoRALinear(nn.Linear({base}), r={case['r']}{extra})"


# --------------------------------------------------------------------------- the reference


class Reference(nn.Module):
    """LoRA in float64 from PyTorch's nn.Linear and the formula, under the kata's names."""

    def __init__(self, case):
        super().__init__()
        I, O, r = case["I"], case["O"], case["r"]
        self.base = nn.Linear(I, O, bias=case["bias"], dtype=torch.float64)
        self.lora_A = nn.Parameter(torch.zeros(r, I, dtype=torch.float64))
        self.lora_B = nn.Parameter(torch.zeros(O, r, dtype=torch.float64))
        self.scaling = scaling_of(case)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling

    def merged_weight(self) -> torch.Tensor:
        return (self.base.weight + self.scaling * (self.lora_B @ self.lora_A)).detach()

    @torch.no_grad()
    def expected(self, x: torch.Tensor) -> torch.Tensor:
        """The output for x, in float64 on the CPU, then in x's dtype and on its device."""
        return self(x.detach().cpu().double()).to(dtype=x.dtype, device=x.device)


# --------------------------------------------------------------------------- tolerances


def magnitudes(reference: Reference) -> tuple:
    """|base.weight|, |base.bias| (or None), |lora_A|, |lora_B| in float64."""
    base = reference.base
    bias = None if base.bias is None else base.bias.detach().abs()
    return base.weight.detach().abs(), bias, reference.lora_A.detach().abs(), reference.lora_B.detach().abs()


def output_scale(reference: Reference, x: torch.Tensor, keep: float = 1.0) -> float:
    """The largest sum of magnitudes an output element adds up: |x| @ |W|.T + |b| + scaling *
    (|x| / keep) @ |A|.T @ |B|.T (keep = 1 - p where the branch sees dropout's scaled x)."""
    W, b, A, B = magnitudes(reference)
    a = x.detach().cpu().double().abs()
    terms = a @ W.T + reference.scaling * ((a / keep) @ A.T @ B.T)
    terms = terms if b is None else terms + b
    return float(terms.max()) if terms.numel() else 1.0


def weight_scale(reference: Reference) -> float:
    """The largest |W| + scaling * |B| @ |A|: a merged (or restored) weight's terms."""
    W, _, A, B = magnitudes(reference)
    return float((W + reference.scaling * (B @ A)).max())


# --------------------------------------------------------------------------- the learner's module, built from a recipe


@dataclass
class Model:
    """One module to build where the kata lives: its recipe (plain data), the float64 reference
    it mirrors, how it was built (for messages) and its case."""

    recipe: dict
    reference: Reference
    name: str
    case: object

    @property
    def dtype(self) -> torch.dtype:
        return self.recipe["dtype"]

    @property
    def device(self) -> str:
        return self.recipe["device"]


def build(gen, case, dtype=torch.float32, device="cpu", *, train=False, trained=True, values=None) -> Model:
    """The recipe of the learner's module around a fresh base, and the float64 reference.
    trained: lora_A and lora_B copied in from the reference (random, or `values`); else the
    learner's own initialisation is kept (and the reference's lora_B is zero: base(x))."""
    reference = modules.randomise_(Reference(case), gen, dtype)
    with torch.no_grad():
        for name, value in (values or {}).items():
            getattr(reference, name).copy_(value.to(dtype).double())
        if not trained:
            reference.lora_B.zero_()
    init_seed = int(torch.randint(2**31, (1,), generator=gen))

    def here(p: torch.Tensor) -> torch.Tensor:
        return p.detach().to(dtype=dtype, device=device)

    recipe = {
        "sizes": (case["I"], case["O"], bool(case["bias"])),
        "r": case["r"],
        "keywords": keywords_of(case),
        "base": {name: here(p) for name, p in reference.base.named_parameters()},
        "lora": {name: here(getattr(reference, name)) for name in ("lora_A", "lora_B")} if trained else None,
        "dtype": dtype,
        "device": str(device),
        "train": train,
        "init_seed": init_seed,
    }
    mode = ".train()" if train else ".eval()" if case["p"] else ""  # eval(): the dropout is off
    return Model(recipe, reference, name_of(case, dtype) + mode, case)


def inputs(gen, case, dtype=torch.float32, device="cpu") -> torch.Tensor:
    return randn(gen, *case["lead"], case["I"], dtype=dtype, device=device)


# --- run where the kata lives (helpers of the scenarios)


def fresh_base(recipe: dict) -> nn.Linear:
    """A new nn.Linear with the recipe's base weights, in its dtype, on its device."""
    I, O, bias = recipe["sizes"]
    base = nn.Linear(I, O, bias=bias, dtype=recipe["dtype"], device=recipe["device"])
    with torch.no_grad():
        for name, p in base.named_parameters():
            p.copy_(recipe["base"][name])
    return base


def construct(kata, recipe: dict, base: nn.Linear):
    """kata.LoRALinear(base, r, ...), its initialisation drawn from the recipe's seed (the
    scenario's caller restores the random state afterwards)."""
    torch.default_generator.manual_seed(recipe["init_seed"])
    if torch.device(recipe["device"]).type == "cuda":
        torch.cuda.manual_seed_all(recipe["init_seed"])
    return kata.LoRALinear(base, recipe["r"], **recipe["keywords"])


def lora_problem(module, state: dict) -> dict | None:
    """Why the recipe's lora_A and lora_B cannot be copied in: not an nn.Parameter, or its shape."""
    for name, value in state.items():
        found = getattr(module, name, None)
        if not isinstance(found, nn.Parameter) or list(found.shape) != list(value.shape):
            shape = list(found.shape) if isinstance(found, torch.Tensor) else None
            return {"problem": name, "kind": type(found).__name__, "found": describe(found), "shape": shape}
    return None


def made(kata, recipe: dict) -> tuple:
    """(the learner's module, the nn.Linear it was given, None), or (None, base, a problem)
    when the recipe's lora_A and lora_B do not fit."""
    base = fresh_base(recipe)
    module = construct(kata, recipe, base)
    if recipe["lora"] is not None:
        problem = lora_problem(module, recipe["lora"])
        if problem:
            return None, base, problem
        with torch.no_grad():
            for name, value in recipe["lora"].items():
                getattr(module, name).copy_(value)
    return module.train(recipe["train"]), base, None


def holding(module, name: str) -> dict:
    """What a module holds under `name`: the tensor (or None), its type's name, a description
    and whether it requires grad."""
    value = getattr(module, name, None)
    tensor = value.detach().clone() if isinstance(value, torch.Tensor) else None
    return {
        name: tensor,
        f"{name} kind": type(value).__name__,
        f"{name} found": describe(value),
        f"{name} requires grad": bool(getattr(value, "requires_grad", False)),
    }


# --- the scenarios


@scenario
def forward(kata, recipe: dict, x) -> dict:
    """The learner's module built from the recipe, called once: its output, and x as the call left it."""
    module, _, problem = made(kata, recipe)
    if problem:
        return problem
    return {"output": module(x), "x": x}


@scenario
def fresh(kata, recipe: dict) -> dict:
    """A new module around a fresh base: lora_A and lora_B as it made them (see `holding`) and
    its scaling."""
    module = construct(kata, recipe, fresh_base(recipe))
    scaling = getattr(module, "scaling", None)
    plain = isinstance(scaling, (bool, int, float, torch.Tensor))
    return holding(module, "lora_A") | holding(module, "lora_B") | {"scaling": scaling if plain else describe(scaling)}


@scenario
def placed(kata, recipe: dict, x) -> dict:
    """A new module around a base on the recipe's device: its own lora_A and lora_B; then, when
    they are on that device, the recipe's copied in and the output for x."""
    module = construct(kata, recipe, fresh_base(recipe))
    seen = {name: holding(module, name)[name] for name in ("lora_A", "lora_B")}
    if any(t is None or str(t.device) != recipe["device"] for t in seen.values()) or lora_problem(
        module, recipe["lora"]
    ):
        return seen
    with torch.no_grad():
        for name, value in recipe["lora"].items():
            getattr(module, name).copy_(value)
    return seen | {"output": module.train(recipe["train"])(x)}


# --------------------------------------------------------------------------- the judging process's side


def refused(model: Model, got: dict) -> dict:
    """A scenario's answer, after refusing a lora_A or lora_B that the recipe's do not fit."""
    if "problem" not in got:
        return got
    part, layout = got["problem"], LAYOUTS[got["problem"]]
    if got["kind"] != "Parameter":
        raise AssertionError(
            pick(
                f"{model.name}.{part} is {got['found']}; expected an nn.Parameter {layout} "
                "(a Parameter itself, not an nn.Linear holding one)",
                f"{model.name}.{part} 是 {got['found']}；应为 nn.Parameter {layout}"
                "（本身就是 Parameter，而不是持有 Parameter 的 nn.Linear）",
            )
        )
    want = list(model.recipe["lora"][part].shape)
    raise AssertionError(
        pick(
            f"{model.name}.{part} has shape {got['shape']}, expected {want}: {part} is {layout}",
            f"{model.name}.{part} 的形状是 {got['shape']}，应为 {want}：{part} 是 {layout}",
        )
    )


def run_forward(implementation, model: Model, x) -> dict:
    return refused(model, forward(implementation, model.recipe, x))


def check_forward(kata, model: Model, x, *, float64_throughout: bool = False, hint: str = "") -> None:
    """The learner's output against the reference's, within the tolerance for the size of its
    terms; `hint` is added to a mismatch's message."""
    text = call_repr(model.name, x)
    allowed = tolerance(x.dtype, output_scale(model.reference, x), float64_throughout=float64_throughout)
    want = model.reference.expected(x)
    with SPEC.diagnosing(lambda i: {"output": run_forward(i, model, x)["output"]}, model.case):
        got = run_forward(kata, model, x)
        assert_close(got["output"], want, call=text, what="output", tolerance=allowed, hint=hint)


def check_lora_parameter(seen: dict, name: str, shape: tuple, dtype, device, call: str) -> None:
    """lora_A / lora_B (as `holding` saw it): a trainable nn.Parameter of `shape` with the base's
    dtype and device."""
    if seen[f"{name} kind"] != "Parameter":
        raise Mismatch(
            pick(
                f"{call}.{name} is {seen[f'{name} found']}; expected an nn.Parameter {list(shape)} (registered on the "
                "module, so an optimiser finds it)",
                f"{call}.{name} 是 {seen[f'{name} found']}；应为 nn.Parameter {list(shape)}（注册在模块上，优化器才能找到它）",
            ),
            what=f"{name} kind",
            actual=seen[f"{name} kind"],
            expected="Parameter",
        )
    value = seen[name]
    expected = torch.empty(shape, dtype=dtype, device="meta" if str(device) == "meta" else device)
    try:
        check_tensor_kind(value, expected, call=call, what=name)
    except Mismatch as error:
        hint = {
            True: pick(f"; {name} is {LAYOUTS[name]}", f"；{name} 是 {LAYOUTS[name]}"),
            False: pick(
                f"; create {name} with base.weight's dtype and device (torch.empty(..., dtype=..., device=...))",
                f"；请用 base.weight 的 dtype 和 device 创建 {name}（torch.empty(..., dtype=..., device=...)）",
            ),
        }[value.shape != expected.shape]
        error.args = (f"{error}{hint}",)
        raise
    if not seen[f"{name} requires grad"]:
        raise Mismatch(
            pick(
                f"{call}.{name} has requires_grad=False; lora_A and lora_B are the parameters that train",
                f"{call}.{name} 的 requires_grad=False；lora_A 和 lora_B 正是要训练的参数",
            ),
            what=f"{name} requires grad",
            actual=False,
            expected=True,
        )


def uniform_example(case, dtype, init_seed: int) -> torch.Tensor:
    """What nn.init.kaiming_uniform_(lora_A, a=sqrt(5)) draws first from init_seed: shown as
    the expected value when lora_A is off (any draw from the same distribution passes)."""
    generator = torch.Generator().manual_seed(init_seed)
    bound = 1 / math.sqrt(case["I"])
    return torch.empty(case["r"], case["I"], dtype=dtype).uniform_(-bound, bound, generator=generator)


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call): x [8, 128, 1024] through a 1024 -> 1024 nn.Linear with
    r = 16, alpha = 32, in eval() mode. PyTorch has no LoRA: the reference is the formula
    written out in float32 with the same weights, base(x) + (x @ A.T @ B.T) * scaling."""
    B, T, C, r = 8, 128, 1024, 16
    gen = torch.Generator().manual_seed(0)
    base = nn.Linear(C, C, device=device)
    module = kata.LoRALinear(base, r, alpha=32).eval()
    with torch.no_grad():
        module.lora_A.copy_(randn(gen, r, C, std=C**-0.5))
        module.lora_B.copy_(randn(gen, C, r, std=r**-0.5))
    A, B_ = module.lora_A.detach().clone(), module.lora_B.detach().clone()
    x = randn(gen, B, T, C, device=device)
    return (lambda: module(x)), (lambda: base(x) + (x @ A.T @ B_.T) * 2.0)


SPEC = KataSpec(
    kata="lora",
    symbol="LoRALinear",
    reference="base(x) + (x @ lora_A.T @ lora_B.T) * alpha / r with base an nn.Linear, in float64, every "
    "parameter random (lora_B included)",
    forbidden=NONE,
    tolerances=TOLERANCES,
    tolerance_note="atol per unit of the magnitude of the terms a result adds up (|x| @ |W|.T + |b| + scaling * "
    "|x| @ |A|.T @ |B|.T for an output; likewise for merged weights and gradients): 8 eps of the dtype, rtol 0 "
    "(float32's eps for float64 in the core tier); the solution and variants measured at most 0.23 of it",
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- merge and unmerge: one story


def weight_of(module) -> torch.Tensor:
    return module.base.weight.detach().clone()


def graph_of(module, before: torch.Tensor) -> str:
    """base.weight's graph after a step: requires_grad, grad_fn, and whether the step put a new
    tensor in its place (`before` is base.weight before the step)."""
    weight = module.base.weight
    fn = None if weight.grad_fn is None else type(weight.grad_fn).__name__
    new = "" if weight is before else pick(", a new tensor in its place", "，且原位置换成了一个新张量")
    return f"requires_grad={weight.requires_grad}, grad_fn={fn}{new}"


FROZEN = "requires_grad=False, grad_fn=None"

# The story, step by step: (the step, what is observed after it).
STORY = (
    ("unmerge() on a module never merged", "base.weight after unmerge() on a module never merged"),
    ("model(x)", "output before merge()"),
    ("merge()", "base.weight after merge()"),
    ("", "base.weight's graph after merge()"),
    ("", "the nn.Linear passed in: its weight after merge() less model.base.weight"),
    ("model(x)", "output after merge()"),
    ("merge() again", "base.weight after merge() twice"),
    ("model(x)", "output after merge() twice"),
    ("lora_B set to new values, train(), model(x)", "output in train() after merge() and a new lora_B"),
    ("lora_B put back, eval(), unmerge()", "base.weight after unmerge()"),
    ("", "base.weight's graph after unmerge()"),
    ("model(x)", "output after unmerge()"),
    ("unmerge() again", "base.weight after unmerge() twice"),
)
STEPS_ZH = {
    "unmerge() on a module never merged": "未 merge 时的 unmerge()",
    "merge() again": "再次 merge()",
    "lora_B set to new values, train(), model(x)": "把 lora_B 设为新值、train()、model(x)",
    "lora_B put back, eval(), unmerge()": "恢复 lora_B、eval()、unmerge()",
    "unmerge() again": "再次 unmerge()",
}


def story_so_far(what: str) -> str:
    """'unmerge() on a module never merged, model(x), merge()': the steps up to `what`."""
    steps = []
    for step, observed in STORY:
        steps += [pick(step, STEPS_ZH.get(step))] if step else []
        if observed == what:
            return pick(", ", "、").join(steps)
    raise KeyError(what)


@scenario
def merge_story(kata, recipe: dict, x, new_B) -> dict:
    """The learner's module (built from the recipe) through unmerge() on a module never merged,
    merge(), merge() again, a new lora_B while merged (in train() mode), lora_B put back,
    unmerge(), unmerge() again (see STORY). The trace: base.weight, its graph and the output
    after each step, whether module.base is the nn.Linear passed in and how that nn.Linear's
    weight differs from module.base.weight after merge(), x as the calls left it; it stops at
    a step that raised ("raised" says what)."""
    module, base, problem = made(kata, recipe)
    if problem:
        return problem
    seen = {"base.weight as loaded": weight_of(module), "keeps base": getattr(module, "base", None) is base, "x": x}

    def step(name: str) -> bool:
        """Call model.merge() or model.unmerge(); False (and what it raised kept) if it raised."""
        try:
            getattr(module, name)()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - judged in order, with the steps before it
            seen["raised"] = pick(
                f"model.{name}() raised {type(error).__name__}: {error}",
                f"model.{name}() 抛出了 {type(error).__name__}: {error}",
            )
            return False
        return True

    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge() on a module never merged"] = weight_of(module)
    seen["output before merge()"] = module(x)
    before = module.base.weight
    if not step("merge"):
        return seen
    seen["base.weight after merge()"] = weight_of(module)
    seen["base.weight's graph after merge()"] = graph_of(module, before)
    seen["the nn.Linear passed in: its weight after merge() less model.base.weight"] = (
        base.weight.detach() - module.base.weight.detach()
    )
    seen["output after merge()"] = module(x)
    if not step("merge"):
        return seen
    seen["base.weight after merge() twice"] = weight_of(module)
    seen["output after merge() twice"] = module(x)
    trained_B = module.lora_B.detach().clone()
    with torch.no_grad():
        module.lora_B.copy_(new_B)
    module.train()
    seen["output in train() after merge() and a new lora_B"] = module(x)
    module.eval()
    with torch.no_grad():
        module.lora_B.copy_(trained_B)
    before = module.base.weight
    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge()"] = weight_of(module)
    seen["base.weight's graph after unmerge()"] = graph_of(module, before)
    seen["output after unmerge()"] = module(x)
    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge() twice"] = weight_of(module)
    return seen

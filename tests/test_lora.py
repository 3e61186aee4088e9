"""lora: judged against nn.Linear plus the LoRA formula, in float64.

PyTorch has no LoRA, so the reference (`Reference` below) is an nn.Linear `base` in float64
with two float64 Parameters beside it, under the kata's names: forward(x) =
base(x) + (x @ lora_A.T @ lora_B.T) * scaling, scaling = alpha / r computed here (alpha None:
1.0). Every parameter is random (modules.randomise_: base.weight and lora_A N(0, 1/in),
lora_B N(0, 1/r), base.bias N(0, 0.4^2)), rounded to the dtype under test and copied by name
into the learner's module: lora_B starts at zero, so a test that only ran the fresh module
would miss most slips. Each test hands the learner a fresh nn.Linear of its own (its weights
copied from the reference's base), so no two implementations ever share one.

The fresh module is judged on its own: lora_A [r, in] and lora_B [out, r] as Parameters with
the base's dtype and device, lora_B exactly zero, lora_A inside [-1/sqrt(in), 1/sqrt(in)]
(Kaiming-uniform with a = sqrt(5)), spread like that uniform and centred (on 4800 values:
thresholds 15 standard deviations away, a false failure has odds below 1e-18), the output
exactly base(x); base frozen, the very module passed in, its values untouched; only lora_A and
lora_B require grad. Gradients of lora_A, lora_B and x against autograd through the float64
reference.

Dropout is judged without depending on how the learner draws its mask (nn.Dropout,
F.dropout, a bernoulli mask of its own): in train() the test sets lora_A to an orthogonal
[r, r] matrix (r = in_features) and lora_B to [identity; random], so the learner's output
reveals exactly which x it fed the branch: each element must be 0 or x / (1 - p) (x is kept
away from 0), the rest of the output must follow from that x, the base must see x untouched,
and the share of zeros must be p (within 0.1 over 3000 elements: 9 standard deviations). In
eval() the formula without dropout must hold.

merge() and unmerge() are judged as one story, every step against float64: unmerging what was
never merged changes nothing (exactly), merge() adds scaling * lora_B @ lora_A into base.weight
without a graph, the output stays the formula's, merging again changes nothing (exactly),
a changed lora_B no longer changes the output (in train() mode, dropout on), unmerge()
restores base.weight (up to rounding) and the formula again, unmerging twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from judge.forbidden import NONE
from judge.testing import modules_mirrored as modules
from judge.testing.checks import (
    Mismatch,
    assert_close,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.modules_mirrored import ModuleKata
from judge.testing.spec import Case, CaseTable, KataSpec, dtypes, edge

FULL = [torch.float64, torch.float32]  # float64 first: the edge cases run in it, and show first
HALF = [torch.float16, torch.bfloat16]
EXACT = {"rtol": 0.0, "atol": 0.0}
ASKS = "base (the nn.Linear passed in), lora_A [r, in_features] and lora_B [out_features, r] (nn.Parameter)"

# Tolerances grow with the size of the terms a result adds up (as cross_entropy's and
# layer_norm's do): an output element adds |x| @ |W|.T + |b| + scaling * |x| @ |A|.T @ |B|.T, a
# merged weight |W| + scaling * |B| @ |A|, each gradient its own products (output_scale,
# weight_scale, gradient_scales): base(x) and the branch may nearly cancel, and scaling reaches
# 32, so a tolerance relative to the result alone would be unfair. atol = ROUNDING * eps(dtype)
# * that scale (its largest element), rtol 0 (the scale bounds the result itself, so its own
# rounding is inside). Measured over 100 seeds x every case of the tests that use them (edge
# cases included; half precision on the random draws), on the solution and both variants (one
# F.linear with the effective weight W + scaling * B @ A, merged through .data; einsum with a
# bernoulli mask and a saved weight): the worst error in units of eps(dtype) * scale was
# float64 1.8 (outputs; gradients 1.6), float32 1.5 (outputs, merged weights; gradients 1.2),
# float16 0.78, bfloat16 0.92: at most 0.23 of ROUNDING = 8. The dropout test's share of zeros
# was at most 0.025 from p (allowed: 0.1). A slip is off by far more in every dtype.
ROUNDING = 8


def tolerance(dtype: torch.dtype, scale: float = 1.0) -> dict:
    """(rtol, atol) for a result of dtype whose terms add up to `scale` in magnitude."""
    return {"rtol": 0.0, "atol": ROUNDING * torch.finfo(dtype).eps * scale}


# Per unit of scale, for the README's table.
TOLERANCES = {dtype: tolerance(dtype) for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)}

# --------------------------------------------------------------------------- the case table
#
# Sizes: lead = x's leading dimensions (x is [*lead, I]), I = in_features, O = out_features,
# r the rank, alpha (None: not passed), bias (base has one), p the dropout (0: not passed).

EDGES = (  # the most telling first
    edge("alpha / r = 4 (r / alpha: 0.25), in != out", lead=(2, 3), I=6, O=9, r=3, alpha=12, bias=True, p=0.0),
    edge("alpha None: scaling 1; dropout off in eval()", lead=(4,), I=5, O=3, r=2, alpha=None, bias=False, p=0.3),
    edge("x one vector [in_features], r above in_features", lead=(), I=3, O=7, r=5, alpha=2.5, bias=True, p=0.1),
    edge("rank 1, one feature in, one out, one position", lead=(1, 1), I=1, O=1, r=1, alpha=2.0, bias=True, p=0.0),
    edge("alpha = 2r, as usual; three leading dims", lead=(2, 1, 3), I=11, O=4, r=8, alpha=16, bias=False, p=0.0),
)


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


def gradient_scales(reference: Reference, x: torch.Tensor, upstream: torch.Tensor) -> dict:
    """The largest sum of magnitudes each gradient adds up over the positions and features."""
    W, _, A, B = magnitudes(reference)
    s = reference.scaling
    a = x.detach().cpu().double().abs().reshape(-1, W.shape[1])
    g = upstream.detach().cpu().double().abs().reshape(-1, W.shape[0])
    found = {
        "output": output_scale(reference, x),
        "gradient of lora_A": s * ((g @ B).T @ a).max(),
        "gradient of lora_B": s * (g.T @ (a @ A.T)).max(),
        "gradient of x": (g @ W + s * (g @ B) @ A).max(),
    }
    return {k: float(v) if float(v) > 0 else 1.0 for k, v in found.items()}


LORA = ModuleKata(
    kata="lora",
    cls="LoRALinear",
    asks=ASKS,
    inputs=("x",),
    reference=lambda case, options: Reference(case),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=lambda case, options: ({"base": "nn.Linear", "r": case["r"]}, keywords_of(case)),
    forward=lambda reference, inputs, kwargs: ({"output": reference(inputs["x"]).detach()}, None),
    shapes=lambda case, inputs, kwargs: {"output": (*case["lead"], case["O"])},
    tolerances=TOLERANCES,
)


def fork_rng(device):
    """The global random state forked: the CPU's, and the GPU's where the module lives there."""
    cuda = torch.device(device).type == "cuda"
    return torch.random.fork_rng(devices=[torch.device(device).index or 0] if cuda else [])


def fresh_base(reference: Reference, dtype, device) -> nn.Linear:
    """A new nn.Linear with the reference's base weights rounded to dtype, on device."""
    ref = reference.base
    base = nn.Linear(ref.in_features, ref.out_features, bias=ref.bias is not None, dtype=dtype, device=device)
    with torch.no_grad():
        for name, p in base.named_parameters():
            p.copy_(getattr(ref, name).to(dtype))
    return base


def construct(implementation, case, base: nn.Linear, init_seed: int, device):
    """implementation.LoRALinear(base, r, ...), its random initialisation drawn from init_seed
    (so every implementation draws the same numbers)."""
    with fork_rng(device):
        torch.manual_seed(init_seed)
        return implementation.LoRALinear(base, case["r"], **keywords_of(case))


def build(
    kata, gen, case, dtype=torch.float32, device="cpu", *, train=False, trained=True, values: dict | None = None
) -> modules.Built:
    """The learner's module around a fresh base, and the float64 reference. trained: lora_A and
    lora_B copied in from the reference (random, or `values`); else the learner's own
    initialisation is kept (and the reference's lora_B is zero, so it gives base(x))."""
    reference = modules.randomise_(Reference(case), gen, dtype)
    with torch.no_grad():
        for name, value in (values or {}).items():
            getattr(reference, name).copy_(value.to(dtype).double())
        if not trained:
            reference.lora_B.zero_()
    parameters = dict(reference.named_parameters())
    init_seed = int(torch.randint(2**31, (1,), generator=gen))
    name = name_of(case, dtype)

    def make(implementation, mode: bool = train) -> nn.Module:
        module = construct(implementation, case, fresh_base(reference, dtype, device), init_seed, device)
        if trained:
            for part, shape in (("lora_A", "[r, in_features]"), ("lora_B", "[out_features, r]")):
                if not isinstance(getattr(module, part, None), nn.Parameter):
                    raise AssertionError(  # noqa: TRY004 - a wrong answer, judged as one
                        f"{name}.{part} is {describe(getattr(module, part, None))}; expected an nn.Parameter {shape} "
                        "(a Parameter itself, not an nn.Linear holding one)"
                    )
            modules.load_parameters(module, parameters, what="LoRALinear", asks=ASKS, built=name)
        return module.train(mode)

    with SPEC.diagnosing(lambda implementation: {"module": make(implementation)}, case):
        module = make(kata)
    mode = ".train()" if train else ".eval()" if case["p"] else ""  # eval(): the dropout is off
    built = modules.Built(module, reference, name + mode, dict(case), lambda i: None)
    built.remake = lambda implementation: make(implementation, built.module.training)
    return built


def inputs(gen, case, dtype=torch.float32, device="cpu") -> dict:
    return {"x": randn(gen, *case["lead"], case["I"], dtype=dtype, device=device)}


def check(built, x: dict) -> None:
    """modules.check, with the tolerance for the size of this output's terms."""
    scale = output_scale(built.reference, x["x"])
    modules.check(dataclasses.replace(LORA, tolerances={x["x"].dtype: tolerance(x["x"].dtype, scale)}), built, x)


# --------------------------------------------------------------------------- the fresh module


def fresh_story(implementation, case, reference: Reference, dtype, device, init_seed: int) -> dict:
    """A new module around a fresh base: what it holds, and the base's values before and after."""
    base = fresh_base(reference, dtype, device)
    before = {name: p.detach().clone() for name, p in base.named_parameters()}
    module = construct(implementation, case, base, init_seed, device)
    seen = {"module": module, "base": base, "before": before}
    for name in ("lora_A", "lora_B", "scaling"):
        seen[name] = getattr(module, name, None)
    return seen


def check_lora_parameter(seen: dict, name: str, shape: tuple, dtype, device, call: str) -> None:
    """lora_A / lora_B: a trainable nn.Parameter of `shape` with the base's dtype and device."""
    value = seen[name]
    if not isinstance(value, nn.Parameter):
        raise Mismatch(
            f"{call}.{name} is {describe(value)}; expected an nn.Parameter {list(shape)} (registered on the module, "
            "so an optimiser finds it)",
            what=name,
            actual=value,
            expected=None,
            kind_only=True,
        )
    expected = torch.empty(shape, dtype=dtype, device="meta" if str(device) == "meta" else device)
    try:
        check_tensor_kind(value, expected, call=call, what=name)
    except Mismatch as error:
        hint = {
            True: f"; {name} is [{'r, in_features' if name == 'lora_A' else 'out_features, r'}]",
            False: f"; create {name} with base.weight's dtype and device (torch.empty(..., dtype=..., device=...))",
        }[value.shape != expected.shape]
        error.args = (f"{error}{hint}",)
        raise
    if not value.requires_grad:
        raise Mismatch(
            f"{call}.{name} has requires_grad=False; lora_A and lora_B are the parameters that train",
            what=f"{name} requires grad",
            actual=False,
            expected=True,
        )


def uniform_example(case, dtype, init_seed: int) -> torch.Tensor:
    """What nn.init.kaiming_uniform_(lora_A, a=sqrt(5)) draws first from init_seed: shown as
    the expected value when lora_A is off (any draw from the same distribution passes)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        bound = 1 / math.sqrt(case["I"])
        return torch.empty(case["r"], case["I"], dtype=dtype).uniform_(-bound, bound)


def check_kaiming_uniform(A: torch.Tensor, case, dtype, init_seed: int, call: str, *, statistics: bool) -> None:
    """lora_A inside +-1/sqrt(in_features), not all zero; with `statistics` (thousands of values),
    spread and centred like that uniform: its mean of squares within 20% of bound^2 / 3 and its
    mean within 0.15 bound (Hoeffding: a correct draw of 4800 values fails with odds below 1e-18)."""
    bound = 1 / math.sqrt(case["I"])
    values = A.detach().cpu().double()
    example = uniform_example(case, dtype, init_seed)

    def off(message: str) -> Mismatch:
        return Mismatch(
            f"{call}.lora_A {message}; nn.Linear's initialisation, nn.init.kaiming_uniform_(lora_A, a=math.sqrt(5)), "
            f"is uniform in [-1/sqrt(in_features), 1/sqrt(in_features)] = [-{bound:.4g}, {bound:.4g}] "
            f"(in_features = {case['I']}, fan_in of lora_A [r, in_features])",
            what="lora_A",
            actual=A,
            expected=example,
            tolerance=TOLERANCES[dtype],
        )

    if values.numel() >= 8 and not bool((values != 0).any()):  # one value may be 0 (odds 6e-8 in float32)
        raise off(
            "is all zeros: with lora_A and lora_B both zero neither gets a gradient and the adapter never trains "
            "(only lora_B starts at zero)"
        )
    slack = bound * 2 * torch.finfo(dtype).eps  # the bound itself, rounded to the dtype
    if bool((values.abs() > bound + slack).any()):
        raise off(f"reaches {values.abs().max().item():.4g}, outside the bound {bound:.4g}")
    if not statistics:
        return
    if float(values.std()) == 0:
        raise off(f"is the constant {values.flatten()[0].item():.4g}")
    square = float((values**2).mean()) / (bound**2 / 3)
    if not 0.8 <= square <= 1.2:
        raise off(f"spreads {math.sqrt(square):.3g} times as wide as a uniform over the bound (std {values.std():.4g})")
    mean = float(values.mean())
    if abs(mean) > 0.15 * bound:
        raise off(f"is not centred on 0: its mean is {mean:.4g} ({mean / bound:.2f} of the bound)")


# --------------------------------------------------------------------------- gradients


def gradients(module, x: torch.Tensor, upstream: torch.Tensor, call: str) -> dict:
    """The output of module(x) and autograd's gradients of sum(output * upstream) for lora_A,
    lora_B and x."""
    mine = x.clone().requires_grad_()
    output = call_and_check_inputs(lambda: module(mine), call, x=mine)
    if not isinstance(output, torch.Tensor) or not output.requires_grad:
        raise AssertionError(
            f"{call} returned {describe(output)} that does not require grad: autograd lost track of lora_A, lora_B "
            "and x (no torch.no_grad(), .detach() or .data inside forward)"
        )
    leaves = [module.lora_A, module.lora_B, mine]
    grads = torch.autograd.grad(output, leaves, upstream, allow_unused=True)
    for name, grad in zip(("lora_A", "lora_B", "x"), grads):
        if grad is None:
            raise AssertionError(f"{call}: no gradient reaches `{name}`: autograd must see every step of forward")
    found = dict(zip(("gradient of lora_A", "gradient of lora_B", "gradient of x"), grads))
    return {"output": output.detach()} | found


GRADIENT_HINTS = {
    "output": "the forward itself is off: base(x) + (x @ lora_A.T @ lora_B.T) * scaling",
    "gradient of lora_A": "lora_A's gradient is scaling * (grad_output @ lora_B).T @ x, summed over the positions",
    "gradient of lora_B": "lora_B's gradient is scaling * grad_output.T @ (x @ lora_A.T), summed over the positions",
    "gradient of x": "x's gradient flows through both paths: grad_output @ base.weight + scaling * grad_output @ "
    "lora_B @ lora_A (the base is frozen, but it must stay in the graph: no torch.no_grad() around base(x))",
}


def reference_gradients(reference: Reference, x: torch.Tensor, upstream: torch.Tensor) -> dict:
    twin = x.detach().cpu().double().requires_grad_()
    with torch.enable_grad():
        output = reference(twin)
        grads = torch.autograd.grad(output, [reference.lora_A, reference.lora_B, twin], upstream.cpu().double())
    found = dict(zip(("gradient of lora_A", "gradient of lora_B", "gradient of x"), grads))
    return {"output": output.detach()} | found


# --------------------------------------------------------------------------- dropout


def dropout_case(rng) -> Case:
    """r = in_features (lora_A square), more outputs than r, 3000 elements of x or more."""
    I = rng.randint(6, 10)
    lead = (rng.randint(5, 7), -(-3000 // (I * 5)))
    alpha = rng.choice([2.0 * I, 16, I / 2])
    p = rng.choice([0.2, 0.3, 0.6, 0.7])  # never 0.5: p read as the probability of keeping shows
    return Case(
        "dropout", {"lead": lead, "I": I, "O": I + rng.randint(1, 4), "r": I, "alpha": alpha, "bias": True, "p": p}
    )


def revealing_values(gen, case) -> dict:
    """lora_A orthogonal [r, r]; lora_B the identity [r, r] stacked on random rows: the first r
    outputs of the branch are scaling * d @ lora_A.T, d the x the branch was fed."""
    r, O = case["r"], case["O"]
    A = torch.linalg.qr(randn(gen, r, r, dtype=torch.float64))[0]
    B = torch.cat([torch.eye(r, dtype=torch.float64), randn(gen, O - r, r, dtype=torch.float64, std=r**-0.5)])
    return {"lora_A": A, "lora_B": B}


def far_from_zero(gen, case, dtype=torch.float32) -> torch.Tensor:
    """x with every element in +-[0.5, 1.5]: kept (x / (1 - p)) and dropped (0) never look alike."""
    shape = (*case["lead"], case["I"])
    magnitude = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return (magnitude * sign).to(dtype)


def nearest_dropout(
    reference: Reference, x: torch.Tensor, output: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """From the learner's output, the x its branch saw (assuming the base saw x), each element
    snapped to 0 or x / (1 - p), whichever is nearer: (the output that snapped x gives, the mask
    of dropped elements)."""
    x64, out64 = x.detach().cpu().double(), output.detach().cpu().double()
    r = reference.lora_A.shape[0]
    with torch.no_grad():
        branch = (out64 - reference.base(x64))[..., :r] / reference.scaling
        seen = branch @ torch.linalg.inv(reference.lora_A.T)  # d, with d @ A.T = branch
        kept = x64 / (1 - p)
        dropped = seen.abs() < (seen - kept).abs()
        snapped = torch.where(dropped, torch.zeros_like(kept), kept)
        expected = reference.base(x64) + (snapped @ reference.lora_A.T @ reference.lora_B.T) * reference.scaling
    return expected, dropped


# --------------------------------------------------------------------------- merge and unmerge


def weight_of(module) -> torch.Tensor:
    return module.base.weight.detach().clone()


def graph_of(module) -> str:
    weight = module.base.weight
    fn = None if weight.grad_fn is None else type(weight.grad_fn).__name__
    return f"requires_grad={weight.requires_grad}, grad_fn={fn}"


FROZEN = "requires_grad=False, grad_fn=None"


# The story, step by step: (the step, what is observed after it).
STORY = (
    ("unmerge() on a module never merged", "base.weight after unmerge() on a module never merged"),
    ("model(x)", "output before merge()"),
    ("merge()", "base.weight after merge()"),
    ("", "base.weight's graph after merge()"),
    ("model(x)", "output after merge()"),
    ("merge() again", "base.weight after merge() twice"),
    ("model(x)", "output after merge() twice"),
    ("lora_B set to new values, train(), model(x)", "output in train() after merge() and a new lora_B"),
    ("lora_B put back, eval(), unmerge()", "base.weight after unmerge()"),
    ("", "base.weight's graph after unmerge()"),
    ("model(x)", "output after unmerge()"),
    ("unmerge() again", "base.weight after unmerge() twice"),
)


def story_so_far(what: str) -> str:
    """'unmerge() on a module never merged, model(x), merge()': the steps up to `what`."""
    steps = []
    for step, observed in STORY:
        steps += [step] if step else []
        if observed == what:
            return ", ".join(steps)
    raise KeyError(what)


def merge_story(module, x: torch.Tensor, new_B: torch.Tensor, call: str) -> dict:
    """unmerge() on a module never merged, merge(), merge() again, a new lora_B while merged (in
    train() mode), lora_B put back, unmerge(), unmerge() again (see STORY): what base.weight,
    its graph and the output are after each step."""
    seen = {"base.weight as loaded": weight_of(module)}

    def run() -> torch.Tensor:
        return call_and_check_inputs(lambda: module(x), call, x=x)

    def step(name: str) -> bool:
        """Call model.merge() or model.unmerge(); False (and what it raised kept) if it raised."""
        try:
            getattr(module, name)()
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - judged in order, with the steps before it
            seen["raised"] = f"model.{name}() raised {type(error).__name__}: {error}"
            return False
        return True

    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge() on a module never merged"] = weight_of(module)
    seen["output before merge()"] = run()
    if not step("merge"):
        return seen
    seen["base.weight after merge()"] = weight_of(module)
    seen["base.weight's graph after merge()"] = graph_of(module)
    seen["output after merge()"] = run()
    if not step("merge"):
        return seen
    seen["base.weight after merge() twice"] = weight_of(module)
    seen["output after merge() twice"] = run()
    trained_B = module.lora_B.detach().clone()
    with torch.no_grad():
        module.lora_B.copy_(new_B)
    module.train()
    seen["output in train() after merge() and a new lora_B"] = run()
    module.eval()
    with torch.no_grad():
        module.lora_B.copy_(trained_B)
    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge()"] = weight_of(module)
    seen["base.weight's graph after unmerge()"] = graph_of(module)
    seen["output after unmerge()"] = run()
    if not step("unmerge"):
        return seen
    seen["base.weight after unmerge() twice"] = weight_of(module)
    return seen


MERGE_HINTS = {
    "base.weight after unmerge() on a module never merged": "unmerge() on a module that is not merged must do "
    "nothing: remember whether the module is merged",
    "output before merge()": "before merging, forward is base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling",
    "base.weight after merge()": "merge() adds scaling * lora_B @ lora_A (shape [out_features, in_features]) "
    "into base.weight",
    "base.weight's graph after merge()": "merge() must record no graph: do it under torch.no_grad(), in place, so "
    "base.weight stays a frozen leaf",
    "output after merge()": "once merged, forward is base(x) alone: the update is already inside base.weight, "
    "adding the branch again counts it twice",
    "base.weight after merge() twice": "merge() on a merged module must do nothing: remember that it is merged",
    "output after merge() twice": "merging twice must leave the module as after one merge()",
    "output in train() after merge() and a new lora_B": "once merged, forward is base(x) alone, in train() mode "
    "too: lora_B no longer takes part (and no dropout applies)",
    "base.weight after unmerge()": "unmerge() subtracts the same scaling * lora_B @ lora_A that merge() added",
    "base.weight's graph after unmerge()": "unmerge() must record no graph: do it under torch.no_grad(), in place",
    "output after unmerge()": "after unmerge(), forward adds the low-rank branch again",
    "base.weight after unmerge() twice": "unmerge() on a module that is not merged must do nothing",
}


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
    "|x| @ |A|.T @ |B|.T for an output; likewise for merged weights and gradients): 8 eps of the dtype, rtol 0; "
    "the solution and variants measured at most 0.23 of it",
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- the fresh module


@dtypes(torch.float64, torch.float32, torch.float16, torch.bfloat16)
def test_lora_A_and_lora_B_are_parameters_with_the_dtype_and_device_of_the_base(kata, rng, gen, dtype):
    """lora_A [r, in_features], lora_B [out_features, r], both trainable nn.Parameters."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            reference, init_seed = Reference(case), int(torch.randint(2**31, (1,), generator=gen))
            call = name_of(case, dtype)

            def replay(implementation, case=case, reference=reference, init_seed=init_seed) -> dict:
                return fresh_story(implementation, case, reference, dtype, "cpu", init_seed)

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                check_lora_parameter(seen, "lora_A", (case["r"], case["I"]), dtype, "cpu", call)
                check_lora_parameter(seen, "lora_B", (case["O"], case["r"]), dtype, "cpu", call)


@dtypes(torch.float32, torch.float64)
def test_lora_B_starts_at_zero_and_lora_A_is_kaiming_uniform_like_nn_linear(kata, rng, gen, dtype):
    """lora_B exactly zero; lora_A uniform in +-1/sqrt(in_features): on every case its bounds, on
    a module of 4800 values also its spread and mean."""
    big = Case(
        "4800 values in lora_A", {"lead": (2,), "I": 300, "O": 200, "r": 16, "alpha": None, "bias": True, "p": 0.0}
    )
    for case in (big, *CASES.cases(rng, edges=dtype == torch.float32)):
        with case.judged():
            reference, init_seed = (
                modules.randomise_(Reference(case), gen, dtype),
                int(torch.randint(2**31, (1,), generator=gen)),
            )
            call = name_of(case, dtype)

            def replay(implementation, case=case, reference=reference, init_seed=init_seed) -> dict:
                return fresh_story(implementation, case, reference, dtype, "cpu", init_seed)

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                check_lora_parameter(seen, "lora_A", (case["r"], case["I"]), dtype, "cpu", call)
                check_lora_parameter(seen, "lora_B", (case["O"], case["r"]), dtype, "cpu", call)
                B = seen["lora_B"]
                if bool((B.detach() != 0).any()):
                    raise Mismatch(
                        f"{call}.lora_B starts at {B.detach().flatten()[:4].tolist()}...; expected all zeros, so that "
                        "the fresh module's output is exactly base(x) (lora_A, not lora_B, gets the random start)",
                        what="lora_B",
                        actual=B,
                        expected=torch.zeros_like(B),
                        tolerance=EXACT,
                    )
                check_kaiming_uniform(seen["lora_A"], case, dtype, init_seed, call, statistics=case is big)


@dtypes(*FULL)
def test_a_fresh_module_gives_the_base_output(kata, rng, gen, dtype, device):
    """Its own lora_A and lora_B (zero): base(x), in eval() and in train() mode."""
    for index, case in enumerate(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            built = build(kata, gen, case, dtype, device, trained=False, train=index % 2 == 1)
            try:
                check(built, inputs(gen, case, dtype, device))
            except Mismatch as error:
                error.args = (
                    (
                        f"{error}. A fresh module's lora_B is zero, so its output is exactly base(x), in train() "
                        "mode too (the dropout touches only the low-rank branch's input)"
                    ),
                )
                raise


def test_keeps_the_base_it_is_given_frozen_and_only_lora_A_and_lora_B_train(kata, rng, gen):
    """self.base is the nn.Linear passed in, its values untouched; base.weight and base.bias have
    requires_grad=False; named_parameters() requiring grad: lora_A and lora_B, nothing else."""
    for case in CASES.cases(rng):
        with case.judged():
            reference, init_seed = (
                modules.randomise_(Reference(case), gen, torch.float32),
                int(torch.randint(2**31, (1,), generator=gen)),
            )
            call = name_of(case)

            def replay(implementation, case=case, reference=reference, init_seed=init_seed) -> dict:
                seen = fresh_story(implementation, case, reference, torch.float32, "cpu", init_seed)
                module = seen["module"]
                seen["keeps base"] = getattr(module, "base", None) is seen["base"]
                seen["trainable"] = sorted(n for n, p in module.named_parameters() if p.requires_grad)
                seen["base unchanged"] = all(
                    torch.equal(p.detach(), seen["before"][n]) for n, p in seen["base"].named_parameters()
                )
                return seen

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                if not seen["keeps base"]:
                    raise Mismatch(
                        f"{call}.base is {describe(getattr(seen['module'], 'base', None))}, not the nn.Linear "
                        "passed in: keep the very module (self.base = base), not a copy: merge() changes its weight "
                        "in place",
                        what="keeps base",
                        actual=False,
                        expected=True,
                    )
                if not seen["base unchanged"]:
                    raise Mismatch(
                        f"{call} changed the values of base's parameters: the base is frozen as it is, never "
                        "re-initialised or scaled",
                        what="base unchanged",
                        actual=False,
                        expected=True,
                    )
                want = ["lora_A", "lora_B"]
                if seen["trainable"] != want:
                    extra = [n for n in seen["trainable"] if n.startswith("base.")]
                    hint = (
                        f": {' and '.join(extra)} must be frozen (requires_grad=False)"
                        if extra
                        else ": lora_A and lora_B are nn.Parameters that require grad; base's are frozen"
                    )
                    raise Mismatch(
                        f"{call}: the parameters that require grad are {seen['trainable']}; expected {want}{hint}",
                        what="trainable",
                        actual=seen["trainable"],
                        expected=want,
                    )


def test_scaling_is_alpha_over_r_as_a_python_float(kata, rng, gen):
    """alpha None means alpha = r: scaling 1.0."""
    for case in CASES.cases(rng):
        with case.judged():
            reference, init_seed = Reference(case), int(torch.randint(2**31, (1,), generator=gen))

            def replay(implementation, case=case, reference=reference, init_seed=init_seed) -> dict:
                return fresh_story(implementation, case, reference, torch.float32, "cpu", init_seed)

            with SPEC.diagnosing(replay, case):
                got, want = replay(kata)["scaling"], scaling_of(case)
                alpha = (
                    "alpha=None means alpha = r"
                    if case["alpha"] is None
                    else f"alpha / r = {case['alpha']} / {case['r']}"
                )
                if not isinstance(got, float) or isinstance(got, bool) or not math.isclose(got, want, rel_tol=1e-12):
                    raise Mismatch(
                        f"{name_of(case)}.scaling is {describe(got)}; expected {alpha} = {want!r}, a Python float",
                        what="scaling",
                        actual=got,
                        expected=want,
                    )


# --------------------------------------------------------------------------- values and gradients


@dtypes(*FULL)
def test_matches_base_plus_the_scaled_low_rank_update_with_random_lora_A_and_lora_B(kata, rng, gen, dtype, device):
    """In eval() mode: any dropout is off."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check(build(kata, gen, case, dtype, device), inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_gradients_of_lora_A_lora_B_and_x_match_autograd_through_the_reference(kata, rng, gen, dtype, device):
    """In train() mode with dropout 0, as a training step runs it."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with (case | {"p": 0.0}).judged() as case:
            built = build(kata, gen, case, dtype, device, train=True)
            x = inputs(gen, case, dtype, device)["x"]
            upstream = randn(gen, *case["lead"], case["O"], dtype=dtype, device=device)
            want = reference_gradients(built.reference, x, upstream)
            scales = gradient_scales(built.reference, x, upstream)
            call = call_repr(built.name, x) + " and autograd.grad(output, [lora_A, lora_B, x], grad_output)"
            originals = x.clone(), upstream.clone()

            def replay(implementation, call=call, originals=originals, built=built) -> dict:
                return gradients(built.remake(implementation), originals[0].clone(), originals[1].clone(), call)

            with SPEC.diagnosing(replay, case):
                got = gradients(built.module, x, upstream, call)
                for what, expected in want.items():
                    expected = expected.to(dtype=dtype, device=device)
                    try:
                        assert_close(
                            got[what], expected, call=call, what=what, tolerance=tolerance(dtype, scales[what])
                        )
                    except Mismatch as error:
                        error.args = (f"{error}. {GRADIENT_HINTS[what]}",)
                        raise


def share(dropped: torch.Tensor) -> float:
    """The share of x's elements dropped, rounded (so two implementations that drop the same agree)."""
    return round(float(dropped.double().mean()), 6)


def check_dropout(kata, gen, case) -> None:
    """One call in train() mode on the revealing lora_A and lora_B, judged whatever mask was drawn."""
    built = build(kata, gen, case, train=True, values=revealing_values(gen, case))
    x = far_from_zero(gen, case)
    call = call_repr(built.name, x) + f" with dropout={case['p']}"
    original, state = x.clone(), torch.get_rng_state()

    def observe(module, x: torch.Tensor) -> dict:
        output = call_and_check_inputs(lambda: module(x), call, x=x)
        expected, dropped = nearest_dropout(built.reference, x, output, case["p"])
        return {"output": output, "expected": expected, "share dropped": share(dropped)}

    def replay(implementation) -> dict:
        module = built.remake(implementation)
        torch.set_rng_state(state)
        return observe(module, original.clone())

    with SPEC.diagnosing(replay, case):
        seen = observe(built.module, x)
        try:
            allowed = tolerance(torch.float32, output_scale(built.reference, x, 1 - case["p"]))
            assert_close(seen["output"], seen["expected"].float(), call=call, what="output", tolerance=allowed)
        except Mismatch as error:
            error.args = (
                (
                    f"{error}. The output is not base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling for any "
                    "dropout mask (expected: the nearest output that is): in train() mode the dropout zeroes "
                    "elements of x, scales the others by 1 / (1 - p), and feeds the result to the low-rank branch "
                    "only; base(x) sees x untouched"
                ),
            )
            raise
        got = seen["share dropped"]
        if abs(got - case["p"]) > 0.1:
            raise Mismatch(
                f"{call} in train() mode zeroed {got:.1%} of the elements of x the low-rank branch sees; expected "
                f"about p = {case['p']:.0%}" + (": the dropout is not applied in train() mode" if got == 0 else ""),
                what="share dropped",
                actual=got,
                expected=case["p"],
            )


def test_in_train_mode_dropout_zeroes_inputs_of_the_low_rank_branch_only(kata, rng, gen):
    """Whatever mask is drawn: each element the branch sees is 0 or x / (1 - p), the output
    follows from it, base(x) sees x untouched, and the share of zeros is p (within 0.1)."""
    for _ in range(2):
        with dropout_case(rng).judged() as case:
            check_dropout(kata, gen, case)


# --------------------------------------------------------------------------- merge and unmerge


@dtypes(*FULL)
def test_merge_folds_the_update_into_base_weight_and_unmerge_takes_it_out(kata, rng, gen, dtype, device):
    """Each step of the story (see merge_story) against float64: weights and outputs within the
    tolerance, merging or unmerging twice exactly a no-op, no graph recorded."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(kata, gen, case, dtype, device)
            x = inputs(gen, case, dtype, device)["x"]
            new_B = randn(gen, case["O"], case["r"], dtype=dtype, device=device, std=case["r"] ** -0.5)
            call = call_repr(built.name, x)
            originals, state = (x.clone(), new_B.clone()), torch.get_rng_state()

            def replay(implementation, built=built, originals=originals, state=state, call=call) -> dict:
                module = built.remake(implementation)
                torch.set_rng_state(state)
                return merge_story(module, originals[0].clone(), originals[1].clone(), call)

            reference = built.reference
            with torch.no_grad():
                output = reference(x.detach().cpu().double()).to(dtype=dtype, device=device)

            def rounded(t: torch.Tensor) -> torch.Tensor:
                return t.to(dtype=dtype, device=device)

            for_output, for_weight = (
                tolerance(dtype, output_scale(reference, x)),
                tolerance(dtype, weight_scale(reference)),
            )
            with SPEC.diagnosing(replay, case):
                seen = merge_story(built.module, x, new_B, call)
                loaded = seen["base.weight as loaded"]
                wants = {
                    "base.weight after unmerge() on a module never merged": (loaded, EXACT),
                    "output before merge()": (output, for_output),
                    "base.weight after merge()": (rounded(reference.merged_weight()), for_weight),
                    "base.weight's graph after merge()": FROZEN,
                    "output after merge()": (output, for_output),
                    "base.weight after merge() twice": (seen.get("base.weight after merge()"), EXACT),
                    "output after merge() twice": (output, for_output),
                    "output in train() after merge() and a new lora_B": (output, for_output),
                    "base.weight after unmerge()": (rounded(reference.base.weight.detach()), for_weight),
                    "base.weight's graph after unmerge()": FROZEN,
                    "output after unmerge()": (output, for_output),
                    "base.weight after unmerge() twice": (seen.get("base.weight after unmerge()"), EXACT),
                }
                for what, want in wants.items():
                    if what not in seen:
                        raise Mismatch(
                            f"model = {built.name}, x = {describe(x)}: after {story_so_far(what)}: {seen['raised']}. "
                            "merge() and unmerge() change base.weight in place under torch.no_grad()",
                            what="raised",
                            actual=seen["raised"],
                            expected=None,
                        )
                    text = f"model = {built.name}, x = {describe(x)}, after {story_so_far(what)},"
                    if isinstance(want, str):
                        if seen[what] != want:
                            raise Mismatch(
                                f"model = {built.name}, after {story_so_far(what)}, base.weight has {seen[what]}; "
                                f"expected {want}. {MERGE_HINTS[what]}",
                                what=what,
                                actual=seen[what],
                                expected=want,
                            )
                        continue
                    expected, allowed = want
                    try:
                        assert_close(seen[what], expected, call=text, what=what, tolerance=allowed)
                    except Mismatch as error:
                        error.args = (f"{error}. {MERGE_HINTS[what]}",)
                        raise


# --------------------------------------------------------------------------- contract


def test_a_rank_below_1_raises_value_error(kata, rng):
    case = CASES.random(rng)[0]
    for r in (0, -1, -rng.randint(2, 5)):
        call = f"LoRALinear(nn.Linear({case['I']}, {case['O']}), r={r})"

        def attempt(implementation, r=r, call=call) -> dict:
            base = nn.Linear(case["I"], case["O"])
            assert_raises_value_error(
                lambda: implementation.LoRALinear(base, r), call=call, reason="r must be at least 1"
            )
            return {}

        with SPEC.diagnosing(attempt, case | {"r": r}):
            attempt(kata)


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            check(build(kata, gen, case, dtype), inputs(gen, case, dtype))


def test_results_follow_the_device_of_the_base_and_the_inputs(kata, rng, gen, other_device):
    """lora_A and lora_B made on the base's device; the output on x's."""
    case = Case("random draw", CASES.draw(rng, 2)[1])
    with case.judged():
        reference, init_seed = Reference(case), int(torch.randint(2**31, (1,), generator=gen))
        call = name_of(case) + f" around a base on {other_device}"

        def replay(implementation) -> dict:
            return fresh_story(implementation, case, reference, torch.float32, other_device, init_seed)

        with SPEC.diagnosing(replay, case):
            seen = call_on_device(lambda: replay(kata), other_device)
            check_lora_parameter(seen, "lora_A", (case["r"], case["I"]), torch.float32, other_device, call)
            check_lora_parameter(seen, "lora_B", (case["O"], case["r"]), torch.float32, other_device, call)
    built = build(kata, gen, case, device=other_device)
    x = inputs(gen, case, device=other_device)
    if other_device != "meta":
        check(built, x)  # fully, with the tolerance for the size of the output's terms
    else:
        modules.check_on_device(LORA, built, case, x, other_device)

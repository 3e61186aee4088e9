"""rms_norm: judged against nn.RMSNorm in float64, with a random weight and eps passed explicitly.

The reference is nn.RMSNorm built in float64 (see judge.testing.modules) with its weight
drawn as 1 + N(0, 0.4^2), rounded to the dtype under test and copied into the learner's
`weight`. It always gets eps explicitly: the learner's eps when one is given, else the eps
nn.RMSNorm would use for an input of the dtype under test (float32's machine epsilon for
float16, bfloat16 and float32 inputs, float64's for float64 inputs).

Inputs mix magnitudes row by row (one row per position of the leading dims): 1e-4 first,
where mean(x ** 2) = 1e-8 is of the order of eps and eps changes the result, then 300,
whose squares overflow float16, then 1 and 3e-3. Normalised shapes are tuples (and lists)
of up to three dims, and ints.
"""

import math

import torch
from torch import nn

from judge.forbidden import RMS_NORM
from judge.testing import modules_mirrored as modules
from judge.testing.checks import assert_close, call_repr, describe
from judge.testing.inputs import randn
from judge.testing.modules_mirrored import ModuleKata
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]

# Row scales, cycled over the positions of the leading dims: the first row is tiny (eps
# matters), the second large (its squares overflow float16, so a half input must be
# computed in float32), then ordinary ones.
ROW_SCALES = (1e-4, 300.0, 1.0, 3e-3)
# Explicit eps values, each of the order of a tiny row's mean square (1e-8) or above it.
EXPLICIT_EPS = (1e-8, 1e-6, 1e-5, 1e-3)

# (rtol, atol) against the float64 reference rounded to the dtype under test. Every output
# element is x * rsqrt(mean square + eps) * weight: a sum of squares (no cancellation) and a
# few roundings, so the error is relative; atol only covers outputs near zero (float16's
# subnormals). Measured over 140 seeds x every case of the four comparison tests, on the
# solution, both variants and F.rms_norm itself in the dtype under test (and a Python loop
# summing the squares one by one), worst relative error:
# float64 1.3e-15 (rtol 1e-13 also covers a sequential sum of 504 squares, n * eps / 2;
# a float64 input computed in float32 is off by ~1e-7), float32 5.9e-7 (5x below rtol),
# float16 9.8e-4 and bfloat16 7.8e-3: one ulp, PyTorch's own order (normalise, cast, then
# weight) included; rtol is 3 ulps, so one more rounding in half precision passes too.
TOLERANCES = {
    torch.float64: {"rtol": 1e-13, "atol": 1e-15},
    torch.float32: {"rtol": 3e-6, "atol": 1e-7},
    torch.float16: {"rtol": 3e-3, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2.4e-2, "atol": 1e-5},
}


def default_eps(dtype: torch.dtype) -> float:
    """The eps nn.RMSNorm uses when given None: the computation (opmath) dtype's machine epsilon."""
    return torch.finfo(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).eps


# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """Leading dims (0 to 2 of them) and a normalised shape of 1 to 3 dims, every size
    different. The first case normalises over two dims, the second over three."""
    cases = []
    for index in range(count):
        n_shape = (2, 3)[index] if index < 2 else rng.randint(1, 3)
        n_lead = rng.choice((1, 2, 2)) if index < 2 else rng.randint(0, 2)
        sizes = rng.sample(range(2, 10), n_lead + n_shape)
        cases.append({"lead": sizes[:n_lead], "shape": tuple(sizes[n_lead:])})
    return cases


# Named edge cases, run every time: the most telling first (the first failure shown is the
# first edge case that fails).
EDGES = (
    # a mean over the last dim only, over every dim, or over the leading dims all differ here
    edge("two normalised dims, odd sizes", lead=[2, 3], shape=(5, 7)),
    edge("three normalised dims, one of size 1", lead=[3], shape=(4, 1, 3)),
    # x / sqrt(x ** 2 + eps): a variance (x - mean) is 0 here
    edge("one element normalised", lead=[4, 5], shape=(1,)),
    edge("no leading dims: the whole input normalised", lead=[], shape=(3, 5)),
    edge("one position", lead=[1, 1], shape=(9,)),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


# --------------------------------------------------------------------------- the module kata


def pytorch_module(case, options) -> nn.RMSNorm:
    return nn.RMSNorm(
        tuple(case["shape"]),
        eps=options["reference_eps"],
        elementwise_affine=options.get("elementwise_affine", True),
        dtype=torch.float64,
    )


def arguments(case, options):
    """The learner's constructor call: normalized_shape as the test passes it (int, tuple,
    list), then eps and elementwise_affine only when the test gives them."""
    keywords = {k: options[k] for k in ("eps", "elementwise_affine") if k in options}
    return {"normalized_shape": options["normalized_shape"]}, keywords


NORM = ModuleKata(
    kata="rms_norm",
    cls="RMSNorm",
    asks="weight (an nn.Parameter of shape normalized_shape) when elementwise_affine=True, no parameter otherwise",
    inputs=("x",),
    reference=pytorch_module,
    parameters=lambda reference: {} if reference.weight is None else {"weight": reference.weight},
    arguments=arguments,
    forward=lambda reference, inputs, kwargs: ({"output": reference(inputs["x"]).detach()}, None),
    tolerances=TOLERANCES,
)


def benchmark(kata, device):
    """(kata call, reference call): a Llama-width hidden state, batch 4, length 64, width 4096,
    float32, against nn.RMSNorm(4096) with the same random weight."""
    B, T, C = 4, 64, 4096
    gen = torch.Generator().manual_seed(0)
    reference = nn.RMSNorm(C, device=device)
    with torch.no_grad():
        reference.weight.copy_(1 + randn(gen, C, std=0.4))
    module = kata.RMSNorm(C)
    modules.load_parameters(module, {"weight": reference.weight}, what=NORM.cls, asks=NORM.asks)
    module.to(device)
    x = randn(gen, B, T, C, device=device)
    return (lambda: module(x)), (lambda: reference(x))


SPEC = KataSpec(
    kata="rms_norm",
    symbol="RMSNorm",
    reference="nn.RMSNorm in float64, a random weight copied in, eps passed explicitly",
    forbidden=RMS_NORM,
    tolerances=TOLERANCES,
    tolerance_note=(
        "relative errors (a sum of squares never cancels): the solution, variants and F.rms_norm "
        "measured at most 1.3e-15 (float64), 5.9e-7 (float32) and one ulp in half precision"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- helpers


def passed_as(rng, shape: tuple):
    """How the test passes normalized_shape: an int (one dim only), a tuple or a list."""
    forms = [tuple, list] + ([lambda s: s[0]] if len(shape) == 1 else [])
    return rng.choice(forms)(shape)


def build(kata, gen, case, dtype=torch.float32, device="cpu", *, shape=None, **options) -> modules.Built:
    """The learner's RMSNorm and the float64 reference, its weight random. `options`: eps and
    elementwise_affine as given to the learner; the reference always gets eps explicitly."""
    reference_eps = options["eps"] if options.get("eps") is not None else default_eps(dtype)
    options = {"normalized_shape": tuple(case["shape"]) if shape is None else shape, **options}
    return modules.build(NORM, kata, gen, case, options | {"reference_eps": reference_eps}, dtype, device)


def make_input(gen, case, dtype=torch.float32, device="cpu") -> dict:
    """x [*lead, *shape], each row (position of the leading dims) at its own scale, ROW_SCALES in turn."""
    lead, shape = list(case["lead"]), list(case["shape"])
    x = randn(gen, math.prod(lead), math.prod(shape), dtype=torch.float64)
    scales = torch.tensor([ROW_SCALES[row % len(ROW_SCALES)] for row in range(x.size(0))], dtype=torch.float64)
    x = (x * scales[:, None]).reshape(*lead, *shape)
    return {"x": x.to(dtype=dtype, device=device)}


def check(built, inputs) -> None:
    modules.check(NORM, built, inputs)


# --------------------------------------------------------------------------- tests


@dtypes(*FULL)
def test_matches_nn_rmsnorm_with_the_default_eps(kata, rng, gen, dtype, device):
    """eps=None: float32's machine epsilon for a float32 input, float64's for a float64 one."""
    for case in CASES.cases(rng):
        with case.judged():
            built = build(kata, gen, case, dtype, device, shape=passed_as(rng, case["shape"]))
            check(built, make_input(gen, case, dtype, device))


@dtypes(*FULL)
def test_matches_nn_rmsnorm_with_an_explicit_eps(kata, rng, gen, dtype, device):
    """eps from 1e-8 to 1e-3, added inside the square root: it matters on the tiny rows."""
    for case in CASES.cases(rng):
        with case.judged():
            eps = rng.choice(EXPLICIT_EPS)
            built = build(kata, gen, case, dtype, device, shape=passed_as(rng, case["shape"]), eps=eps)
            check(built, make_input(gen, case, dtype, device))


@dtypes(*HALF)
def test_half_precision_is_computed_in_float32_and_cast_back(kata, rng, gen, dtype):
    """float16 squares overflow above 256 and underflow below 2.4e-4; eps=None means float32's
    eps (the computation dtype's), not the half dtype's."""
    for case in CASES.cases(rng):
        with case.judged():
            check(build(kata, gen, case, dtype), make_input(gen, case, dtype))
    for case in CASES.random(rng, 2):
        with case.judged():
            check(build(kata, gen, case, dtype, eps=rng.choice(EXPLICIT_EPS)), make_input(gen, case, dtype))


@dtypes(*FULL)
def test_without_elementwise_affine_there_is_no_weight(kata, rng, gen, dtype):
    """elementwise_affine=False: no parameter at all, self.weight is None, the output unscaled."""
    for case in CASES.cases(rng):
        with case.judged():
            eps = rng.choice((None, *EXPLICIT_EPS))
            options = {"elementwise_affine": False} | ({} if eps is None else {"eps": eps})
            built = build(kata, gen, case, dtype, **options)
            weight = getattr(built.module, "weight", AttributeError)
            if weight is not None:
                shown = "missing" if weight is AttributeError else f"{describe(weight)}"
                raise AssertionError(
                    f"{built.name}.weight is {shown}; expected None, as nn.RMSNorm's "
                    '(register_parameter("weight", None))'
                )
            check(built, make_input(gen, case, dtype))


def test_normalized_shape_may_be_an_int_a_tuple_a_list_or_a_size(kata, rng, gen):
    """Each form builds the same module: self.normalized_shape is the tuple, the weight of that shape."""
    case = CASES.random(rng)[0]
    n = case["shape"][-1]
    for shape, form in (
        (n, (n,)),
        ((n,), (n,)),
        ([n], (n,)),
        (tuple(case["shape"]), tuple(case["shape"])),
        (list(case["shape"]), tuple(case["shape"])),
        (torch.Size(case["shape"]), tuple(case["shape"])),
    ):
        sized = case | {"shape": form}
        built = build(kata, gen, sized, shape=shape)
        kept = built.module.normalized_shape
        if not isinstance(kept, tuple) or kept != form:
            raise AssertionError(f"{built.name}.normalized_shape is {kept!r}; expected the tuple {form!r}")
        check(built, make_input(gen, sized))


def test_a_new_module_keeps_its_settings_and_starts_with_a_weight_of_ones(kata, rng):
    """As nn.RMSNorm: normalized_shape as a tuple, eps as given (None stays None),
    elementwise_affine, and a trainable weight of ones of shape normalized_shape."""
    shape = tuple(CASES.random(rng)[0]["shape"])
    for eps, affine in ((None, True), (rng.choice(EXPLICIT_EPS), True), (None, False)):
        built = f"RMSNorm({shape!r}, eps={eps!r}, elementwise_affine={affine!r})"
        module = kata.RMSNorm(shape, eps=eps, elementwise_affine=affine)
        pytorch = nn.RMSNorm(shape, eps=eps, elementwise_affine=affine)
        for name in ("normalized_shape", "eps", "elementwise_affine"):
            mine, theirs = getattr(module, name, "<missing>"), getattr(pytorch, name)
            if mine != theirs or type(mine) is not type(theirs):
                raise AssertionError(f"{built}.{name} is {mine!r}; nn.RMSNorm keeps {theirs!r}")
        names = sorted(name for name, _ in module.named_parameters())
        if names != (["weight"] if affine else []):
            raise AssertionError(f"{built} has parameters {names}; expected {['weight'] if affine else []}")
        if not affine:
            continue
        weight = getattr(module, "weight", None)
        if not isinstance(weight, nn.Parameter) or weight.shape != shape or not weight.requires_grad:
            raise AssertionError(
                f"{built}.weight is {describe(weight)}; expected a trainable Parameter of shape {shape}"
            )
        if not torch.equal(weight.detach(), torch.ones(shape)):
            raise AssertionError(
                f"{built}.weight starts at {weight.detach().flatten()[:6].tolist()}...; nn.RMSNorm starts at ones"
            )


def test_gradients_flow_back_to_the_input_and_the_weight_like_pytorch(kata, rng, gen):
    """Autograd must see every step: no .detach(), .data or torch.no_grad() inside forward."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case, torch.float64, eps=rng.choice(EXPLICIT_EPS))
    x = make_input(gen, case, torch.float64)["x"]
    upstream = randn(gen, *x.shape, dtype=torch.float64)
    call = call_repr(built.name, x) + ".backward"

    def gradients(module) -> dict:
        mine = x.clone().requires_grad_()
        output = module(mine)
        if not output.requires_grad:
            raise AssertionError(f"{call}: the output does not require grad; autograd lost track of the input")
        module.zero_grad()
        (output * upstream).sum().backward()
        if mine.grad is None or module.weight.grad is None:
            raise AssertionError(f"{call}: no gradient reached `{'x' if mine.grad is None else 'weight'}`")
        return {"the gradient of `x`": mine.grad, "the gradient of `weight`": module.weight.grad}

    twin = x.clone().requires_grad_()
    (built.reference(twin) * upstream).sum().backward()
    want = {"the gradient of `x`": twin.grad, "the gradient of `weight`": built.reference.weight.grad}
    with SPEC.diagnosing(lambda implementation: gradients(built.remake(implementation)), case):
        got = gradients(built.module)
        for what, expected in want.items():
            assert_close(got[what], expected, call=call, what=what)  # PyTorch's float64 defaults


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    case = CASES.random(rng)[0]
    built = build(kata, gen, case, device=other_device)
    modules.check_on_device(NORM, built, case, make_input(gen, case, device=other_device), other_device)


def test_does_not_modify_its_inputs(kata, rng, gen):
    """modules.call checks every call; here in each dtype, with and without a weight."""
    case = CASES.random(rng)[0]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for affine in (True, False):
            built = build(kata, gen, case, dtype, elementwise_affine=affine)
            modules.call(NORM, built, make_input(gen, case, dtype))

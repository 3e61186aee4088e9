"""softmax: judged against F.softmax and F.log_softmax in float64.

Two public functions, softmax(x, dim=-1) and log_softmax(x, dim=-1), each compared with
PyTorch's own in float64 (the input converted exactly), rounded to x's dtype. Inputs are
made row by row (a "row" is one slice along the reduced dim), so each named case puts its
trap in every row: scores of +-1e4 (exp overflows without the max subtracted), rows 1000
apart (a max over the whole tensor underflows whole rows), -inf among finite scores,
the reduced dim first, in the middle, of size 1, a transposed view, and one score 10 above
the rest of its row (half precision computed in its own dtype rounds the sum to 1 there). A row that is entirely -inf is
undefined (PyTorch gives NaN): it is blanked in both results before they are compared.

Tolerances: see `tolerance` below; the measured figures are in the comment above it.
"""

import torch
import torch.nn.functional as F

from judge.forbidden import SOFTMAX as SOFTMAX_CALLS
from judge.language import pick
from judge.testing.checks import assert_close, check_tensor_kind
from judge.testing.functions import FunctionKata
from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import SINGLE_OP

FULL = (torch.float32, torch.float64)
HALF = (torch.bfloat16, torch.float16)  # bfloat16 first: computed in its own dtype, it is off by percents
NEG_INF = float("-inf")
NAMES = ("softmax", "log_softmax")
REFERENCES = {"softmax": F.softmax, "log_softmax": F.log_softmax}
WHAT = {"softmax": "probabilities", "log_softmax": "log-probabilities"}


# --------------------------------------------------------------------------- tolerances

# (rtol, atol) of a result, from x's dtype and its amplitude A = max(1, max finite |x|).
# Two honest orders of operations exist: PyTorch's, (x - m) - log(sum(exp(x - m))), and the
# textbook log-sum-exp, x - (m + log(sum(exp(x - m)))) (scipy's softmax is exp(x - lse)).
# The second rounds m + log(sum) at the scale of |x|: an absolute error of about eps * A in
# every exponent, which PyTorch's order avoids (pytorch#11752) but which is no slip; so the
# allowed error grows with A (the input's own resolution):
#   softmax:     rtol = ROUND * eps(x's dtype) + SHIFT * eps(compute dtype) * A,
#                atol = SUBNORMAL * the smallest subnormal of x's dtype (underflowed values);
#   log_softmax: rtol = ROUND * eps(x's dtype), atol = SHIFT * eps(compute dtype) * A.
# The compute dtype is float32 for float16 and bfloat16 inputs. Half precision: a float32
# computation rounded once and the float64 reference rounded once differ by at most one
# ulp, which is at most eps(x's dtype) relative; ROUND = 2 leaves twice that.
# Measured over 100 seeds x every case of this table (9 edge cases, 6 random draws) in every
# dtype, worst error as a fraction of the allowed one, softmax / log_softmax:
#   the solution:                         float64 0.068 / 0.076, float32 0.11 / 0.099,
#                                         float16 0.48 / 0.48, bfloat16 0.31 / 0.39
#   log-sum-exp form (variant):           float64 0.18 / 0.11, float32 0.22 / 0.12,
#                                         float16 0.49 / 0.49, bfloat16 0.46 / 0.50
#   online softmax, float64 for halves:   float64 0.062 / 0.068, float32 0.11 / 0.088, halves 0
#   F.softmax / F.log_softmax in x's own dtype (25 seeds): float32 0.11 / 0.079, softmax in
#   half 0.50; but PyTorch's CPU log_softmax rounds m + log(sum) to the half dtype: 63x
#   (float16) and 58x (bfloat16) the allowed error on a top score near 0, as the
#   wave's rule (half computed in float32) forbids.
# The core tier judges a float64 result as a float32 one (see tolerance()): a float64 input
# computed in float32 throughout (the slip float64_computed_in_float32) measured at most
# 0.15 / 0.099 of it over 100 seeds x every case, and its gradients through autograd at most
# 0.024 / 0.16 of PyTorch's float32 single-op tolerance (what the gradient test allows a
# float64 result); the float64 convention test holds both to float64's own.
# Computed in the half dtype itself (the slip half_computed_in_half): log_softmax at least
# 18x (float16) and 37x (bfloat16) over on the edge case "one score 10 above the rest" in
# 40 seeds out of 40, softmax in bfloat16 at least 1.9x; softmax in float16 only 1 to 2 ulps off
# (0.9x to 1.9x): float16 keeps enough digits for a softmax, not for its log.
ROUND = {torch.float64: 8, torch.float32: 8, torch.float16: 2, torch.bfloat16: 2}
SHIFT = 8
SUBNORMAL = 4


def smallest_subnormal(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps


def tolerance(name: str, x: torch.Tensor, *, float64_throughout: bool = False) -> dict:
    """The tolerance for kata.<name>(x). The float64 rule (FLOAT64_RULE): unless
    float64_throughout, a float64 result gets what a float32 computation would (float32's
    eps, subnormals and rounding), as the core tier accepts a float32 step; the convention
    test holds it to float64's own."""
    dtype = core_dtype(x.dtype, float64_throughout)  # the dtype the result is judged as
    compute = torch.float32 if dtype in HALF else dtype
    finite = x[torch.isfinite(x)]
    amplitude = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    round_off = ROUND[dtype] * torch.finfo(dtype).eps
    shift = SHIFT * torch.finfo(compute).eps * amplitude
    if name == "softmax":
        return {"rtol": round_off + shift, "atol": SUBNORMAL * smallest_subnormal(dtype)}
    return {"rtol": round_off, "atol": shift}


# --------------------------------------------------------------------------- the case table

# values: how each row is made (see make_input). layout: "contiguous", or "transposed" (the
# same values in a view whose last two dims are swapped in memory).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("scores of +-1e4: exp overflows without the max subtracted", "分数为 +-1e4：不减去最大值，exp 就会溢出",
         shape=[4, 7], dim=-1, values="+-1e4", layout="contiguous"),
    edge("rows 1000 apart: one max per row, not over the whole tensor",
         "各行相差 1000：每行取各自的最大值，而不是整个张量的最大值",
         shape=[6, 5], dim=1, values="rows apart", layout="contiguous"),
    edge("-inf among finite scores, one row all -inf (not judged)", "有限分数中夹着 -inf，有一行全是 -inf（不评判）",
         shape=[5, 6], dim=-1, values="-inf", layout="contiguous"),
    edge("the first dim reduced (dim=0), odd sizes", "在第一维上归约（dim=0），各维大小为奇数",
         shape=[7, 3, 5], dim=0, values="plain", layout="contiguous"),
    edge("a middle dim (dim=-2) of a transposed view", "转置视图的中间一维（dim=-2）",
         shape=[3, 5, 4], dim=-2, values="plain", layout="transposed"),
    edge("the reduced dim of size 1", "被归约的维大小为 1",
         shape=[3, 1, 4], dim=1, values="plain", layout="contiguous"),
    edge("size-1 dims around the reduced one (dim=-3)", "被归约维的两侧都是大小为 1 的维（dim=-3）",
         shape=[1, 6, 1, 1], dim=-3, values="plain", layout="contiguous"),
    edge("a single element", "只有一个元素",
         shape=[1], dim=0, values="plain", layout="contiguous"),
    edge("one score 10 above the rest: half precision needs float32",
         "有一个分数比其余的高 10：半精度需要在 float32 中计算",
         shape=[6, 11], dim=-1, values="one on top", layout="contiguous"),
)
# fmt: on


def hidden_cases(rng, count: int) -> list[dict]:
    """1 to 4 dims, every size different, the reduced one up to 33 long; dim given as a
    positive or a negative number; rows of every kind mixed (see make_input)."""
    cases = []
    for _ in range(count):
        ndim = rng.choice((1, 2, 2, 3, 3, 4))
        shape = rng.sample(range(2, 12), ndim)
        axis = rng.randrange(ndim)
        shape[axis] = rng.choice([n for n in range(2, 34) if n not in shape])
        dim = axis - ndim if rng.random() < 0.5 else axis
        layout = rng.choice(("contiguous", "transposed")) if ndim > 1 else "contiguous"
        cases.append({"shape": shape, "dim": dim, "values": "mixed", "layout": layout})
    return cases


CASES = CaseTable(draw=hidden_cases, edges=EDGES, draws=3)


def make_rows(gen, kind: str, rows: int, n: int) -> torch.Tensor:
    """[rows, n] float64 scores, each row (one slice along the reduced dim) made by `kind`."""
    x = randn(gen, rows, n, dtype=torch.float64)
    if kind == "+-1e4":  # rows all near +1e4, mixed, all near -1e4, mixed
        signs = torch.where(torch.rand(rows, n, generator=gen) < 0.5, -1.0, 1.0).double()
        pattern = torch.tensor([1.0, 0.0, -1.0, 0.0], dtype=torch.float64)[torch.arange(rows) % 4][:, None]
        signs = torch.where(pattern == 0, signs, pattern)
        return 3 * x + 1e4 * signs
    if kind == "rows apart":  # row offsets 1000 or more apart: exp(-1000) is 0 even in float64
        offsets = torch.tensor([0.0, -1000.0, 2000.0, -2000.0, 1000.0, 3000.0], dtype=torch.float64)
        return 3 * x + offsets[torch.arange(rows) % len(offsets)][:, None]
    if kind == "-inf":  # about 40% -inf, first in row 0, row 1 entirely -inf, a finite score in every other row
        blocked = torch.rand(rows, n, generator=gen) < 0.4
        blocked[:, -1] = False
        blocked[0, 0] = n > 1
        if rows > 1:
            blocked[1] = True
        return (3 * x).masked_fill(blocked, NEG_INF)
    if kind == "one on top":  # x - max and the sum round badly in half precision (1 + 7e-4 is 1 in bfloat16)
        top = torch.randint(n, (rows, 1), generator=gen)
        return x.scatter(1, top, 10 + x.gather(1, top))
    if kind == "mixed":  # per row: a std of 0.5, 3 or 8, an offset within +-20, about 15% -inf
        std = torch.tensor([0.5, 3.0, 8.0], dtype=torch.float64)[torch.arange(rows) % 3][:, None]
        offset = 40 * torch.rand(rows, 1, generator=gen, dtype=torch.float64) - 20
        blocked = torch.rand(rows, n, generator=gen) < 0.15
        keep = torch.randint(n, (rows, 1), generator=gen)
        blocked = blocked.scatter(1, keep, False)
        return (std * x + offset).masked_fill(blocked, NEG_INF)
    return 3 * x  # "plain"


def make_input(gen, case, dtype, device="cpu") -> torch.Tensor:
    """x of case["shape"], its rows along case["dim"] made by case["values"], in case["layout"]."""
    shape, dim = list(case["shape"]), case["dim"]
    n = shape[dim]
    moved = shape[: dim % len(shape)] + shape[dim % len(shape) + 1 :]
    rows = make_rows(gen, case["values"], max(1, torch.Size(moved).numel()), n)
    x = rows.reshape(*moved, n).movedim(-1, dim).contiguous().to(dtype=dtype, device=device)
    if case.get("layout") == "transposed" and x.dim() > 1:
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same values, non-contiguous
    return x


# --------------------------------------------------------------------------- calls


def undefined_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """True on every element of a row that is entirely -inf (undefined, never judged)."""
    return (x == NEG_INF).all(dim=dim, keepdim=True).expand(x.shape)


def blanking(undefined: torch.Tensor):
    """Zero the undefined rows of a result of the expected kind (any other value as it is)."""

    def blank(value):
        if isinstance(value, torch.Tensor) and value.shape == undefined.shape and not value.is_meta:
            return value.masked_fill(undefined.to(value.device), 0)
        return value

    return blank


def reference(name: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    return REFERENCES[name](x.double(), dim=dim).to(x.dtype)


def comparing(name: str, x: torch.Tensor, dim: int, *, float64_throughout: bool = False):
    """compare(got, want, call=, what=) for kata.<name>(x, dim): the kind first, then the
    values within tolerance(), the undefined rows blanked in both (and in a slip's result)."""
    blank = blanking(undefined_rows(x, dim).cpu())
    allowed = tolerance(name, x, float64_throughout=float64_throughout)

    def compare(got, want, *, call: str, what: str) -> None:
        check_tensor_kind(got, want, call=call, what=what)
        assert_close(blank(got), blank(want), call=call, what=what, tolerance=allowed, project=blank)

    return compare


def check_against_pytorch(kata, name: str, x, dim=None, *, float64_throughout=False) -> None:
    """kata.<name>(x, dim=dim) (dim left out when None) against PyTorch's in float64."""
    reduced = -1 if dim is None else dim
    compare = comparing(name, x, reduced, float64_throughout=float64_throughout)
    kwargs = {} if dim is None else {"dim": dim}
    with SOFTMAX.judging(kata, x, symbol=name, sizes={"N": x.size(reduced)}, **kwargs) as call:
        compare(call[WHAT[name]], reference(name, x, reduced), call=call.text, what=WHAT[name])


def check_gradient(kata, name: str, x, dim: int, upstream, *, float64_throughout=False) -> None:
    """The gradient autograd computes through kata.<name>(x, dim) against autograd through
    PyTorch's, both in x's dtype, within PyTorch's single-op tolerance for the dtype the
    result is judged as: float32's for a float64 x unless float64_throughout (FLOAT64_RULE)."""
    twin = x.clone().requires_grad_()
    (REFERENCES[name](twin, dim=dim) * upstream).sum().backward()
    allowed = SINGLE_OP[core_dtype(x.dtype, float64_throughout)]
    with SOFTMAX.judging_gradients(
        kata, x, symbol=name, wrt=(0,), upstream=upstream, sizes={"N": x.size(dim)}, dim=dim
    ) as got:
        call = f"{SOFTMAX.text(name, (x,), {'dim': dim})}.backward"
        assert_close(got["the gradient of `x`"], twin.grad, call=call, what="the gradient of `x`", tolerance=allowed)


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: attention scores of batch 8, 8 heads,
    128 x 128 keys, float32, softmax over the keys, against F.softmax."""
    gen = torch.Generator().manual_seed(0)
    scores = randn(gen, 8, 8, 128, 128, device=device, std=3.0)
    return (lambda: kata.softmax(scores, dim=-1)), (lambda: F.softmax(scores, dim=-1))


SPEC = KataSpec(
    kata="softmax",
    symbol="softmax",
    reference="F.softmax and F.log_softmax in float64",
    forbidden=SOFTMAX_CALLS,
    also={"log_softmax": SOFTMAX_CALLS},
    tolerances={
        dtype: tolerance("softmax", torch.ones(1, dtype=dtype), float64_throughout=True) for dtype in (*FULL, *HALF)
    },
    tolerance_note=(
        "shown for scores up to 1 in size; A = the largest abs(x): softmax rtol 8 eps + 8 eps(compute) * A "
        "and atol 4 subnormals (a purely relative check), "
        "log_softmax rtol 8 eps and atol 8 eps(compute) * A (a log-sum-exp rounded at the scale of x); half "
        "precision 2 eps (two roundings differ by one ulp at most): the solution and variants measured at most "
        "0.22 of these in float32 and float64, 0.5 in half precision"
    ),
    cases=CASES,
    benchmark=benchmark,
)
SOFTMAX = FunctionKata(SPEC, outputs=WHAT, parameters={name: ("x", "dim") for name in NAMES})


# --------------------------------------------------------------------------- the math


@core(zh="softmax 与 PyTorch 一致")
@dtypes(*FULL)
def test_softmax_matches_pytorch(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_against_pytorch(kata, "softmax", make_input(gen, case, dtype, device), case["dim"])


@core(zh="log_softmax 与 PyTorch 一致")
@dtypes(*FULL)
def test_log_softmax_matches_pytorch(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_against_pytorch(kata, "log_softmax", make_input(gen, case, dtype, device), case["dim"])


@core(zh="dim 默认为最后一维")
def test_dim_defaults_to_the_last(kata, rng, gen):
    for case in CASES.random(rng, 2):
        case = case | {"dim": -1}
        with case.judged():
            for name in NAMES:
                check_against_pytorch(kata, name, make_input(gen, case, torch.float32))


# --------------------------------------------------------------------------- conventions


@convention(
    "float16 and bfloat16 are computed in float32 (or better) and the result is cast back to x's dtype.",
    zh="半精度的 softmax 在 float32 中计算",
)
@dtypes(*HALF)
def test_softmax_in_half_precision_is_computed_in_float32(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_against_pytorch(kata, "softmax", make_input(gen, case, dtype, device), case["dim"])


@convention(
    "float16 and bfloat16 are computed in float32 (or better) and the result is cast back to x's dtype.",
    zh="半精度的 log_softmax 在 float32 中计算",
)
@dtypes(*HALF)
def test_log_softmax_in_half_precision_is_computed_in_float32(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_against_pytorch(kata, "log_softmax", make_input(gen, case, dtype, device), case["dim"])


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """Values and autograd's gradients, held to float64's own tolerances."""
    for case in CASES.cases(rng, 2):
        with case.judged():
            x = make_input(gen, case, torch.float64)
            for name in NAMES:
                check_against_pytorch(kata, name, x, case["dim"], float64_throughout=True)
    case = CASES.random(rng)[0] | {"values": "plain"}
    with case.judged():
        x = make_input(gen, case, torch.float64)
        upstream = randn(gen, *x.shape, dtype=torch.float64)
        for name in NAMES:
            check_gradient(kata, name, x, case["dim"], upstream, float64_throughout=True)


@convention(
    "gradients flow back to x through autograd (no .detach(), .item(), numpy or torch.no_grad() on the way).",
    zh="梯度像 PyTorch 的一样回传到 x",
)
def test_gradients_flow_back_to_x_like_pytorchs(kata, rng, gen):
    """Autograd must see every step; float64 inputs, judged as the core tier judges float64."""
    case = CASES.random(rng)[0] | {"values": "plain"}
    x = make_input(gen, case, torch.float64)
    upstream = randn(gen, *x.shape, dtype=torch.float64)
    with case.judged():
        for name in NAMES:
            check_gradient(kata, name, x, case["dim"], upstream)


@convention("an out-of-range dim raises IndexError, as PyTorch's does.", zh="越界的 dim 抛出 IndexError")
def test_an_out_of_range_dim_raises_index_error(kata, rng, gen):
    """As PyTorch: dim must lie in [-x.dim(), x.dim()); no wrapping around."""
    case = CASES.random(rng)[0]
    x = make_input(gen, case, torch.float32)
    for name in NAMES:
        for dim in (x.dim(), -x.dim() - 1):
            SOFTMAX.assert_raises(
                kata, IndexError, x, dim=dim, symbol=name, reason=pick(f"x has {x.dim()} dims", f"x 只有 {x.dim()} 维")
            )


@convention("the result is on x's device.", zh="结果位于 x 所在的设备上")
def test_results_follow_the_device_of_x(kata, other_device):
    case = EDGES[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def make(device):
        return (make_input(torch.Generator().manual_seed(0), case, torch.float32, device),), {"dim": case["dim"]}

    x = make("cpu")[0][0]
    for name in NAMES:
        SOFTMAX.on_device(
            kata,
            other_device,
            make=make,
            expected=lambda device, name=name: {WHAT[name]: reference(name, make(device)[0][0], case["dim"])},
            compare=comparing(name, x, case["dim"]),
            symbol=name,
            sizes={"N": x.size(case["dim"])},
        )


@convention("x is never changed in place.", zh="不修改输入")
def test_does_not_modify_its_input(kata, rng, gen):
    """In each dtype, where a kata may convert in place."""
    case = CASES.random(rng)[2]
    for dtype in (*FULL, *HALF):
        x = make_input(gen, case, dtype)
        for name in NAMES:
            with SOFTMAX.judging(kata, x, symbol=name, dim=case["dim"]) as call:
                SOFTMAX.assert_inputs_unchanged(call, (x,), {"dim": case["dim"]}, symbol=name)

"""layer_norm: the forward judged against F.layer_norm, the hand-written backward against
autograd through F.layer_norm, both in float64.

The references run in float64 on the inputs as the kata gets them (rounded to the dtype
under test), on the inputs' device, and are rounded to that dtype. F.layer_norm itself
takes only a sequence as normalized_shape; the kata also takes an int (as nn.LayerNorm).
Weights are drawn as 1 + N(0, 0.4^2), biases and grad_output as N(0, 0.4^2) and N(0, 1).

Inputs: each row (one position of the leading dims) has its own spread and mean. For the
forward the rows mix spreads: 3e-3 first (a variance of 9e-6, of the order of eps, so eps
changes the result), then 1, 300 (its squares overflow float16: a half input must be
computed in float32) and 0.5; each row's mean is a few times its spread (a row that is not
centred shows a missing mean). The backward's grad_input scales as 1 / spread, so each
backward call gives all its rows one spread (1 in most tests, 3e-3 where eps is judged,
300 in float16), and each gradient's tolerance grows with the size of the terms it sums
(see gradient_scales).

Autograd inside layer_norm_backward, in any form, is refused by the AUTOGRAD rules, and so
is any result that records a graph: its tests call it with tensors that do not require grad.
Its gradients are plain outputs of that call (a FunctionKata call of the symbol), never
autograd through the kata.

The core tier judges float64 results with float32's tolerances (FLOAT64_RULE); one
convention test holds them to float64's own.
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import AUTOGRAD, LAYER_NORM
from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, check_tensor_kind, describe
from judge.testing.functions import FunctionKata, tuple_of
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge
from judge.testing.tolerances import per_dtype

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]

# Row spreads (std) cycled over the positions of the leading dims in the forward tests, and
# each row's mean in units of its spread (cycled alike).
FORWARD_SPREADS = (3e-3, 1.0, 300.0, 0.5)
MEANS = (1.5, 3.0, -0.5, 0.0)
SMALL, ORDINARY, LARGE = 3e-3, 1.0, 300.0  # one spread for every row of a backward call
# Explicit eps values: each changes the result on rows of spread 3e-3 (a variance of 9e-6).
EXPLICIT_EPS = (1e-6, 1e-5, 1e-4, 1e-3)

# Forward: (rtol, atol) against F.layer_norm in float64, rounded to the dtype under test.
# The output is x_hat * weight + bias with x_hat of order 1 whatever the row's spread: the
# error is absolute on that scale (x - mean loses a few ulps of the row's mean, which is up
# to 3x its spread). Measured over 100 seeds x every case of the forward tests' kinds, on
# the solution and both variants, worst error: float64 1.3e-14 (atol 1e-13: 8x), float32
# 4.4e-6 (atol 2e-5: 4.6x; F.layer_norm in float32 itself 4.2e-6), float16 3.9e-3 and
# bfloat16 7.8e-3 on outputs up to 4 (one ulp, the final rounding: 0.33 and 0.19 of the
# allowed, about 2 ulps).
TOLERANCES = per_dtype(float64=(1e-13, 1e-13), float32=(1.3e-6, 2e-5), float16=(2e-3, 2e-3), bfloat16=(1.6e-2, 1.6e-2))
# ... and no less than this many roundoffs times the call's condition (forward_tolerance).
CONDITION_ULPS = 6
# Backward: rtol, and atol per unit of the size of the terms each gradient sums (see
# gradient_scales: grad_input is rstd * (grad_x_hat - its row mean - x_hat * the row mean of
# grad_x_hat * x_hat), terms that cancel, so its error follows the terms, not the result).
# Measured as for the forward (every backward test's kind with spreads 3e-3, 1 and 300, with
# and without a weight, 100 seeds), the worst error over that scale: float64 1.8e-15 (the
# float64 Jacobian variant; atol 1e-14: 5.7x), float32 2.0e-7 (atol 1e-6: 4.9x; PyTorch's
# own float32 autograd 1.8e-7), float16 2.2e-4 (atol 1e-3: 4.6x), bfloat16 1.5e-3 (atol
# 8e-3: 5.3x); rtol covers each element's final rounding (2 ulps in half precision).
# A float64 input computed in float32 throughout (the slip float64_computed_in_float32),
# judged by float32's tolerances as the core tier judges float64: at most 0.31 of
# the forward's and 0.095 of the backward's (100 seeds, as above).
GRAD_TOLERANCES = per_dtype(
    float64=(1e-13, 1e-14), float32=(1.3e-6, 1e-6), float16=(2e-3, 1e-3), bfloat16=(1.6e-2, 8e-3)
)


def grad_tolerance(dtype: torch.dtype, scale: float, *, float64_throughout: bool = False) -> dict:
    """The backward's tolerance for one gradient: atol per unit of `scale`, the size of the
    terms it sums (see gradient_scales), not of the result: the terms cancel. A float64
    result gets float32's unless float64_throughout (see FLOAT64_RULE)."""
    tolerance = GRAD_TOLERANCES[core_dtype(dtype, float64_throughout)]
    return {"rtol": tolerance["rtol"], "atol": tolerance["atol"] * scale}


# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """Leading dims (0 to 2 of them) and a normalised shape of 1 to 3 dims, every size
    different. The first draw normalises over two dims behind two leading dims."""
    cases = []
    for index in range(count):
        n_shape = 2 if index == 0 else rng.randint(1, 3)
        n_lead = 2 if index == 0 else rng.choice((0, 1, 2, 2))
        sizes = rng.sample(range(2, 10), n_lead + n_shape)
        cases.append({"lead": sizes[:n_lead], "shape": tuple(sizes[n_lead:])})
    return cases


# Named edge cases, run every time: the most telling first (the first failure shown is the
# first edge case that fails).
# fmt: off
EDGES = (
    # the last dim only, the first leading dim only, every dim: each gives another result
    edge("two normalised dims behind two leading dims, odd sizes", "两个前导维后接两个归一化维，奇数尺寸",
         lead=[3, 4], shape=(5, 7)),
    # variance 0: x - mean is 0, so the output is the bias and grad_input is 0
    edge("one normalised element (variance 0)", "只有一个归一化元素（方差为 0）",
         lead=[4, 3], shape=(1,)),
    # grad_weight is summed over no dim at all; sum(dim=()) sums over every dim
    edge("no leading dims: the whole input one row", "没有前导维：整个输入就是一行",
         lead=[], shape=(3, 5)),
    edge("three normalised dims, one of size 1", "三个归一化维，其中一个大小为 1",
         lead=[2], shape=(4, 1, 3)),
    edge("one position", "只有一个位置",
         lead=[1, 1], shape=(9,)),
)
# fmt: on
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


# --------------------------------------------------------------------------- inputs


def make_x(gen, case, dtype, device, spreads=FORWARD_SPREADS) -> torch.Tensor:
    """x [*lead, *shape]: row r (a position of the leading dims) has spread spreads[r % len]
    and mean MEANS[r % 4] times that spread."""
    lead, shape = list(case["lead"]), list(case["shape"])
    rows = math.prod(lead)
    x = randn(gen, rows, math.prod(shape), dtype=torch.float64)
    spread = torch.tensor([spreads[r % len(spreads)] for r in range(rows)], dtype=torch.float64)
    mean = torch.tensor([MEANS[r % len(MEANS)] for r in range(rows)], dtype=torch.float64) * spread
    x = (x * spread[:, None] + mean[:, None]).reshape(*lead, *shape)
    return x.to(dtype=dtype, device=device)


def make_affine(gen, case, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = tuple(case["shape"])
    weight = 1 + randn(gen, *shape, std=0.4, dtype=torch.float64)
    bias = randn(gen, *shape, std=0.4, dtype=torch.float64)
    return weight.to(dtype=dtype, device=device), bias.to(dtype=dtype, device=device)


def passed_as(rng, shape: tuple):
    """How a test passes normalized_shape: an int (one dim only), a tuple, a list or a torch.Size."""
    forms = [tuple, tuple, list, torch.Size] + ([lambda s: s[0]] * 2 if len(shape) == 1 else [])
    return rng.choice(forms)(shape)


def sizes_of(case) -> dict:
    return {"N": math.prod(case["shape"]), "rows": math.prod(case["lead"])}


# --------------------------------------------------------------------------- the forward


def forward_reference(x, normalized_shape, weight=None, bias=None, eps=1e-5) -> torch.Tensor:
    """F.layer_norm in float64 on the inputs' device, rounded to x's dtype."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    double = lambda t: None if t is None else t.double()
    return F.layer_norm(x.double(), shape, double(weight), double(bias), eps).to(x.dtype)


def forward_reference_of(positional: tuple, keywords: dict) -> torch.Tensor:
    return forward_reference(*positional, **keywords)


def forward_call(args: dict) -> tuple[tuple, dict]:
    """layer_norm(x, normalized_shape, weight=..., bias=..., eps=...) with the keywords the test gives."""
    return (args["x"], args["normalized_shape"]), {k: args[k] for k in ("weight", "bias", "eps") if k in args}


def row_conditions(x, normalized_shape, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (a position of the leading dims), in float64: rstd and max|x| * rstd, how much
    x_hat amplifies the rounding of x - mean (about eps(dtype) * max|x|), each [rows, 1]."""
    n = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    rows = x.double().reshape(-1, math.prod(x.shape[x.dim() - n :]))
    rstd = torch.rsqrt(torch.var(rows, dim=1, correction=0, keepdim=True) + eps)
    return rstd, rows.abs().amax(dim=1, keepdim=True) * rstd


def forward_tolerance(args: dict, *, float64_throughout: bool = False) -> dict:
    """TOLERANCES for x's dtype (the core tier's: FLOAT64_RULE), its atol raised where the
    call's rows are ill-conditioned. x - mean carries the rounding of the mean, up to one unit
    of the compute dtype's roundoff u on max|x| (float32 for half precision), and rstd scales
    it: the honest error grows as u * max|x_row| * rstd_row * |weight|, the row's condition.
    The test's rows keep it below about 7 (a mean at most 3 spreads away), where atol holds;
    but two values that nearly coincide give rstd up to 1/sqrt(eps): seed 700004 drew one at
    690, and the solution's output was off by 3.0e-5 there (atol 2e-5). One element: x - mean
    is exactly 0 whatever x is."""
    judged = core_dtype(args["x"].dtype, float64_throughout)
    tolerance = dict(TOLERANCES[judged])
    _, conditions = row_conditions(args["x"], args["normalized_shape"], args.get("eps", 1e-5))
    if args["x"].numel() == conditions.numel():
        return tolerance  # one element a row (or none at all)
    condition = float(conditions.max())
    weight = float(args["weight"].double().abs().max()) if args.get("weight") is not None else 1.0
    u = torch.finfo(torch.float64 if judged == torch.float64 else torch.float32).eps
    tolerance["atol"] = max(tolerance["atol"], CONDITION_ULPS * u * condition * weight)
    return tolerance


def check_forward(kata, args: dict, case, *, float64_throughout: bool = False) -> None:
    want = forward_reference(**args)
    tolerance = forward_tolerance(args, float64_throughout=float64_throughout)
    positional, keywords = forward_call(args)
    with LN.judging(kata, *positional, symbol="layer_norm", sizes=sizes_of(case), **keywords) as call:
        SPEC.assert_close(call["output"], want, call=call.text, what="output", tolerance=tolerance)


def forward_args(gen, case, dtype, device, *, shape=None, weight=True, bias=True, eps=None, spreads=FORWARD_SPREADS):
    args = {"x": make_x(gen, case, dtype, device, spreads), "normalized_shape": shape or tuple(case["shape"])}
    w, b = make_affine(gen, case, dtype, device)
    args |= ({"weight": w} if weight else {}) | ({"bias": b} if bias else {})
    return args | ({} if eps is None else {"eps": eps})


# --------------------------------------------------------------------------- the backward

NAMES = ("grad_input", "grad_weight", "grad_bias")
ORDER = ("grad_bias", "grad_weight", "grad_input")  # each depends on more of the derivation
HINTS = {
    "grad_bias": "grad_bias needs only grad_output: each bias element is used at every position of the "
    "leading dims, so sum over all of them (and only them).",
    "grad_weight": "grad_bias is right: check x_hat (recomputed as the forward does: the biased variance, "
    "eps inside the square root, over every normalised dim) and the sum over the leading dims.",
    "grad_input": "grad_weight is right, so x_hat is: check grad_input's terms: the weight in grad_x_hat, "
    "the term through the mean, the term through the variance (each a mean over the row) and rstd.",
    "grad_input without a weight": "check the recomputed x_hat (the biased variance, eps inside the square "
    "root, every normalised dim) and grad_input's terms: the one through the mean, the one through the "
    "variance (each a mean over the row) and rstd.",
}
HINTS_ZH = {
    "grad_bias": "grad_bias 只需要 grad_output：每个 bias 元素在前导维的每个位置上都被用到，"
    "所以要对所有前导维求和（且只对它们求和）。",
    "grad_weight": "grad_bias 是对的：检查 x_hat（按前向的做法重新计算：有偏方差，eps 在平方根内，"
    "覆盖每个归一化维）以及对前导维的求和。",
    "grad_input": "grad_weight 是对的，所以 x_hat 也是对的：检查 grad_input 的各项：grad_x_hat 中的 weight、"
    "经由均值的那一项、经由方差的那一项（各自是对一行取的均值）以及 rstd。",
    "grad_input without a weight": "检查重新计算的 x_hat（有偏方差，eps 在平方根内，覆盖每个归一化维）以及 "
    "grad_input 的各项：经由均值的那一项、经由方差的那一项（各自是对一行取的均值）以及 rstd。",
}


def backward_reference(grad_output, x, normalized_shape, weight=None, bias=None, eps=1e-5) -> dict:
    """Autograd through F.layer_norm in float64 on the inputs' device, rounded to x's dtype:
    grad_weight and grad_bias are None without a weight (then there is no bias either)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    leaves = [x.detach().double().requires_grad_()]
    if weight is not None:
        leaves += [weight.detach().double().requires_grad_(), bias.detach().double().requires_grad_()]
    with torch.enable_grad():
        output = F.layer_norm(leaves[0], shape, *(leaves[1:] if weight is not None else (None, None)), eps)
        grads = torch.autograd.grad(output, leaves, grad_output.double())
    grads = [g.to(x.dtype) for g in grads] + [None, None] * (weight is None)
    return dict(zip(NAMES, grads))


def gradient_scales(grad_output, x, normalized_shape, weight=None, bias=None, eps=1e-5) -> dict:
    """The size of the terms each gradient sums, in float64, which its error follows (the
    terms cancel: a row of variance 0 gives exactly 0). Per row, x - mean loses about
    eps(dtype) * max|x|, which x_hat carries times rstd: the row's conditioning is
    c = 1 + max|x| * rstd. grad_input: the largest rstd * |grad_output * weight| * c of a
    row; grad_weight: the largest sum over the rows of |grad_output| * c; grad_bias: the
    largest sum over the rows of |grad_output|."""
    rstd, conditions = row_conditions(x, normalized_shape, eps)
    N = grad_output.numel() // rstd.numel()
    g = grad_output.double().abs().reshape(-1, N)
    conditioning = 1 + conditions
    g_weighted = g if weight is None else g * weight.double().abs().reshape(1, N)
    return {
        "grad_input": float((rstd * g_weighted * conditioning).max()),
        "grad_weight": float((g * conditioning).sum(dim=0).max()),
        "grad_bias": float(g.sum(dim=0).max()),
    }


def backward_call(args: dict) -> tuple[tuple, dict]:
    """layer_norm_backward(grad_output, x, normalized_shape, weight=..., eps=...) with the
    keywords the test gives (the bias is the reference's alone: no gradient depends on it)."""
    positional = (args["grad_output"], args["x"], args["normalized_shape"])
    return positional, {k: args[k] for k in ("weight", "eps") if k in args}


triple = tuple_of(*NAMES)  # the backward's result as {name: gradient}, after checking it is a triple


def check_gradient_kinds(call: str, got: dict, want: dict) -> None:
    """Type, shape, dtype and device of each gradient, before any value; None where no weight."""
    for name in NAMES:
        if want[name] is None:
            if got[name] is not None:
                raise Mismatch(
                    pick(
                        f"{call} returned {name} {describe(got[name])}; expected None: without a weight there is "
                        "no weight and no bias, so grad_weight and grad_bias are both None",
                        f"{call} 返回的 {name} 是 {describe(got[name])}，应为 None：没有 weight 时既没有 weight "
                        "也没有 bias，所以 grad_weight 和 grad_bias 都是 None",
                    ),
                    what=name,
                    actual=got[name],
                    expected=None,
                    kind_only=True,
                )
            continue
        try:
            check_tensor_kind(got[name], want[name], call=call, what=name)
        except Mismatch as error:
            if got[name] is None:
                error.args = (
                    pick(
                        f"{error}; with a weight, grad_weight and grad_bias are both tensors",
                        f"{error}；有 weight 时，grad_weight 和 grad_bias 都是张量",
                    ),
                )
            raise


def judge_gradients(call: str, got: dict, want: dict, scales: dict, *, float64_throughout: bool = False) -> None:
    """Kinds first, then the values in dependency order, with a hint for the first one off."""
    check_gradient_kinds(call, got, want)
    for name in ORDER:
        if want[name] is None:
            continue
        tolerance = grad_tolerance(want[name].dtype, scales[name], float64_throughout=float64_throughout)
        hint = "grad_input without a weight" if want["grad_weight"] is None and name == "grad_input" else name
        assert_close(
            got[name], want[name], call=call, what=name, tolerance=tolerance, hint=pick(HINTS[hint], HINTS_ZH[hint])
        )


def check_backward(kata, args: dict, case, *, float64_throughout: bool = False) -> None:
    """The learner's gradients (the outputs of its layer_norm_backward) against autograd's
    through F.layer_norm, computed on the inputs as they were."""
    want, scales = backward_reference(**args), gradient_scales(**args)
    positional, keywords = backward_call(args)
    with LN.judging(kata, *positional, symbol="layer_norm_backward", sizes=sizes_of(case), **keywords) as call:
        judge_gradients(call.text, call.outputs, want, scales, float64_throughout=float64_throughout)


@scenario
def backward_under_no_grad(kata, args: tuple, kwargs: dict):
    """kata.layer_norm_backward(*args, **kwargs) inside torch.no_grad(), as the grader times it."""
    with torch.no_grad():
        return kata.layer_norm_backward(*args, **kwargs)


def backward_args(gen, case, dtype, device, *, spread=ORDINARY, shape=None, weight=True, eps=None) -> dict:
    """grad_output, x (every row of one spread), normalized_shape, and weight (with the bias
    the reference's forward adds: no gradient depends on its value) when asked."""
    args = {
        "grad_output": randn(gen, *case["lead"], *case["shape"], dtype=dtype, device=device),
        "x": make_x(gen, case, dtype, device, (spread,)),
        "normalized_shape": shape or tuple(case["shape"]),
    }
    if weight:
        args["weight"], args["bias"] = make_affine(gen, case, dtype, device)
    return args | ({} if eps is None else {"eps": eps})


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call, None, the reference side's notes): a forward and a backward
    over batch 8, length 128, width 1024 in float32, against F.layer_norm run with autograd
    recording and autograd's backward (the grader times under torch.no_grad(), so the reference
    turns grad on). PyTorch's fused kernels make a pass or two over the data where eager code
    makes about twenty, so the notes also time autograd through the formula written out eagerly:
    the fair yardstick for hand-written tensor code."""
    B, T, C = 8, 128, 1024
    gen = torch.Generator().manual_seed(0)
    x, grad_output = randn(gen, B, T, C, device=device), randn(gen, B, T, C, device=device)
    weight = (1 + randn(gen, C, std=0.4)).to(device)
    bias = randn(gen, C, std=0.4, device=device)
    leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]

    def mine():
        return kata.layer_norm(x, C, weight, bias), kata.layer_norm_backward(grad_output, x, C, weight)

    def reference():
        with torch.enable_grad():
            output = F.layer_norm(leaves[0], (C,), leaves[1], leaves[2])
            return output.detach(), torch.autograd.grad(output, leaves, grad_output)

    def eager():
        with torch.enable_grad():
            centred = leaves[0] - leaves[0].mean(-1, keepdim=True)
            output = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5) * leaves[1] + leaves[2]
            return output.detach(), torch.autograd.grad(output, leaves, grad_output)

    def notes() -> dict:
        from torch.utils import benchmark as torch_benchmark

        from judge.timing import MIN_RUN_TIME, format_seconds

        eager()
        if device == "cuda":
            torch.cuda.synchronize()
        timer = torch_benchmark.Timer("fn()", globals={"fn": eager}, num_threads=torch.get_num_threads())
        return {"eager autograd": format_seconds(timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median)}

    return mine, reference, None, notes  # the notes need autograd: measured on the judge's side


SPEC = KataSpec(
    kata="layer_norm",
    symbol="layer_norm",
    reference="F.layer_norm in float64; the backward against autograd through it",
    forbidden=LAYER_NORM,
    also={"layer_norm_backward": LAYER_NORM + AUTOGRAD},
    tolerances=TOLERANCES,
    tolerance_note=(
        "the forward's (solution and variants measured at most 4.4e-6 in float32, one ulp in half "
        "precision), its atol at least 6 roundoffs times the call's condition max|x| * rstd * |weight| "
        "(two values that nearly coincide); the backward's atol is per unit of its terms' size, "
        "rstd * |grad_output * weight| * (1 + max|x| * rstd) for grad_input (terms that cancel): float32 1e-6, "
        "measured at most 2.0e-7"
    ),
    cases=CASES,
    benchmark=benchmark,
)


LN = FunctionKata(
    SPEC,
    outputs={"layer_norm": "output", "layer_norm_backward": triple},
    parameters={
        "layer_norm": ("x", "normalized_shape", "weight", "bias", "eps"),
        "layer_norm_backward": ("grad_output", "x", "normalized_shape", "weight", "eps"),
    },
)

"""cross_entropy: judged against F.cross_entropy in float64.

The reference is F.cross_entropy on the same logits converted to float64 (exact for every
dtype under test), rounded to the input's dtype. Inputs are [N, C], [N, C, d1] and
[N, C, d1, d2] (some made as a [B, T, V] tensor and passed as logits.transpose(1, 2), as a
language model's loss does, so the class dim is 1 and not contiguous), and [C] with a 0-d
target. Targets mix class indices with ignored positions (ignore_index: the default -100,
or a custom value: the first class, the last, one strictly between, or -1), with at least one position
kept, so a mean is always defined (a mean over zero targets is NaN in PyTorch: never judged).

Logits are ordinary (N(0, 3^2)) or large: each position offset by up to +-7000 and its
classes spread by N(0, 1000^2), so logits reach about 1e4: exp overflows without the max
subtracted, log(softmax) underflows to -inf, and a max over the whole tensor leaves whole
positions underflowing. The tolerance grows with max|logit| (errors compatible with
float32 arithmetic at the logits' magnitude, as the kata says; in float64 too in the core
tier, whose float64 results get float32's tolerance: see FLOAT64_RULE).
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import CROSS_ENTROPY
from judge.language import pick
from judge.testing.checks import assert_close
from judge.testing.functions import FunctionKata, computation_eps
from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import SINGLE_OP

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases show first in it
HALF = (torch.float16, torch.bfloat16)
REDUCTIONS = ("none", "sum", "mean")  # "none" first: a slip shows position by position
ORDINARY = 3.0  # std of ordinary logits: the softmax neither flat nor saturated
LARGE_OFFSET, LARGE_SPREAD = 7000.0, 1000.0  # large logits: per-position offset, per-class spread

# --------------------------------------------------------------------------- tolerances
#
# Each per-position loss is log(sum exp(x - max)) - (x_t - max) (and, with smoothing, a mean
# of such terms): every term is at most about max|logit| + log C, so an honest computation
# in a dtype with machine epsilon eps is off by a few eps * (max|logit| + log C); one that
# forms log-sum-exp as max + log(sum) first (off by eps * max|logit| even when the loss is
# near 0) included. atol = ROUNDING * eps * (max|logit| + log C), for "none" and "mean";
# for "sum", times the number of non-ignored positions. eps is the computation dtype's:
# float64 for float64 inputs, float32 for every other dtype; half-precision results add
# rtol = RESULT_ULPS ulps of their own dtype (the result is rounded to it).
#
# Measured over 100 seeds x (the 7 edge cases + 3 random draws) x 3 reductions x (smoothing 0
# and random) x (ordinary and large logits), the solution and both variants (rows flattened
# with log-sum-exp as max + log(sum) and boolean indexing; a smoothed one-hot distribution
# dotted with the log-probabilities), worst error as a fraction of this tolerance:
# float64 0.29, float32 0.34 (large logits 0.33), float16 0.46, bfloat16 0.48 (a one-ulp
# difference in the final rounding to the half dtype, as the reference's float64 result and
# a float32 result round apart). A float64 input computed through float32 is off by ~1e-7
# relative: over 1e7 times the float64 tolerance, which only the float64 convention test
# holds it to; the core tier gives a float64 result float32's (see tolerance()), of which
# that slip (float64_computed_in_float32) measured at most 0.22 (100 seeds, as above).
ROUNDING = 8
RESULT_ULPS = 2
# The float64 gradient (softmax - smoothed one-hot, times the upstream gradient, up to about
# 3): the solution and both variants measured at most 2.7e-15 off autograd through
# F.cross_entropy over 100 seeds (0.27 of atol alone); a float32 gradient is off by ~1e-7.
# The gradient test judges graph hygiene: it gives a float64 gradient the tolerance of a
# float32 computation (as the core tier would), of which a float64 input computed in
# float32 throughout measured at most 0.063 (7.3e-7 off, 100 seeds); float64's own is for
# the float64 convention test.
GRADIENT_TOLERANCES = {
    torch.float64: {"rtol": 1e-12, "atol": 1e-14},
    torch.float32: SINGLE_OP[torch.float32],
}


def tolerance(
    dtype: torch.dtype, magnitude: float = 1.0, classes: int = 1, count: int = 1, *, float64_throughout=False
) -> dict:
    """(rtol, atol) for a loss of this dtype: magnitude = max|logit|, classes = C, count = the
    number of non-ignored positions summed ("sum"), 1 otherwise. The float64 rule
    (FLOAT64_RULE): unless float64_throughout, a float64 loss gets float32's computation eps,
    as the core tier accepts a float32 step; the convention test holds it to float64's."""
    atol = ROUNDING * computation_eps(core_dtype(dtype, float64_throughout)) * (magnitude + math.log(classes)) * count
    rtol = 0.0 if dtype in FULL else RESULT_ULPS * torch.finfo(dtype).eps
    return {"rtol": rtol, "atol": atol}


# --------------------------------------------------------------------------- the case table
#
# Sizes: N (absent: a [C] input with a 0-d target), C, d = the extra dims d1..dk, layout:
# "contiguous", or "transposed" (made [N, *d, C], then the classes moved to dim 1, as
# logits.transpose(1, 2) gives for a [B, T, V] tensor).

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    # T = V: a log-softmax or a gather over the wrong dim still runs here (and gives wrong values)
    edge("[B, T, V] logits passed as logits.transpose(1, 2), T = V",
         "[B, T, V] 的 logits 以 logits.transpose(1, 2) 传入，T = V",
         N=2, C=6, d=[6], layout="transposed"),
    edge("[B, T, V] logits passed as logits.transpose(1, 2), odd sizes",
         "[B, T, V] 的 logits 以 logits.transpose(1, 2) 传入，奇数尺寸",
         N=3, C=11, d=[5], layout="transposed"),
    edge("two extra dims: [N, C, d1, d2]", "两个额外维：[N, C, d1, d2]",
         N=3, C=5, d=[7, 2], layout="contiguous"),
    edge("one sample: input [C], a 0-d target", "单个样本：input 为 [C]，target 为 0 维",
         C=9, d=[], layout="contiguous"),
    edge("[N, C], more samples than classes", "[N, C]，样本数多于类别数",
         N=13, C=3, d=[], layout="contiguous"),
    edge("size 1: N = 1, d1 = 1", "大小为 1：N = 1，d1 = 1",
         N=1, C=4, d=[1], layout="contiguous"),
    edge("one class (C = 1): every loss is 0", "只有一个类别（C = 1）：每个损失都是 0",
         N=5, C=1, d=[], layout="contiguous"),
)
# fmt: on


def hidden_sizes(rng, count: int) -> list[dict]:
    """[N, C], [N, C, d1], [N, C, d1, d2] or [C], every size different; d1 may be 1."""
    cases = []
    for index in range(count):
        n_extra = (1, 2, 0)[index] if index < 3 else rng.choice((0, 1, 1, 2, None))
        if n_extra is None:
            cases.append({"C": rng.randrange(2, 30), "d": [], "layout": "contiguous"})
            continue
        sizes = rng.sample(range(2, 16), 2 + n_extra)
        if n_extra and rng.random() < 0.2:
            sizes[2] = 1
        layout = rng.choice(("contiguous", "transposed")) if n_extra else "contiguous"
        cases.append({"N": sizes[0], "C": sizes[1], "d": sizes[2:], "layout": layout})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


def target_shape(case) -> list[int]:
    return [case["N"], *case["d"]] if "N" in case else []


def make_logits(gen, case, dtype=torch.float32, device="cpu", *, large=False) -> torch.Tensor:
    """[N, C, *d] (or [C]): ordinary N(0, 3^2) logits, or large ones (up to about 1e4)."""
    C, positions = case["C"], target_shape(case)
    x = randn(gen, *positions, C, dtype=torch.float64, std=ORDINARY)
    if large:
        offset = (torch.rand(*positions, 1, generator=gen, dtype=torch.float64) * 2 - 1) * LARGE_OFFSET
        x = offset + x * (LARGE_SPREAD / ORDINARY)
    if positions:
        x = x.movedim(-1, 1)  # (N, C, *d): a [B, T, V] tensor's transpose(1, 2)
        if case["layout"] == "contiguous":
            x = x.contiguous()
    return x.to(dtype=dtype, device=device)


def make_target(gen, case, ignore_index=-100, device="cpu", p_ignore=0.3) -> torch.Tensor:
    """int64 class indices of the target's shape, about p_ignore of them ignore_index (never
    all: one position is always kept); kept positions never hold the ignored class."""
    C, shape = case["C"], target_shape(case)
    classes = [c for c in range(C) if c != ignore_index]
    picks = torch.randint(len(classes), shape, generator=gen)
    target = torch.tensor(classes, dtype=torch.int64)[picks]
    ignored = torch.rand(shape, generator=gen) < p_ignore
    if ignored.dim():
        ignored.view(-1)[int(torch.randint(ignored.numel(), (1,), generator=gen))] = False
    else:
        ignored = torch.tensor(False)
    return target.masked_fill(ignored, ignore_index).to(device)


# Where a custom ignore_index lies: the first class, the last, one strictly between, or outside
# the classes (-1, as nanoGPT passes it). A slip that compares with the default -100, or only
# skips the ends, shows in one of them.
IGNORE_KINDS = ("first class", "last class", "a middle class", "outside the classes")


def custom_ignore_index(rng, case, kind: str | None = None) -> int:
    """A custom ignore_index other than -100, of `kind` (one of IGNORE_KINDS), or drawn; the
    first class where C is too small for the kind asked, and -1 for a single class (ignoring
    it would ignore every position)."""
    C, kind = case["C"], kind or rng.choice(IGNORE_KINDS)
    if C < 2:
        return -1
    if kind == "a middle class" and C >= 3:
        return rng.randrange(1, C - 1)
    if kind == "last class" and C >= 2:
        return C - 1
    return -1 if kind == "outside the classes" else 0


# --------------------------------------------------------------------------- calls


def sizes(case) -> dict:
    return {k: case[k] for k in ("N", "C") if k in case}


def reference(input, target, **kwargs) -> torch.Tensor:
    return F.cross_entropy(input.double(), target, **kwargs).to(input.dtype)


def allowed(input, target, *, float64_throughout=False, **kwargs) -> dict:
    """The tolerance for this call (see tolerance())."""
    C = input.size(0 if input.dim() == 1 else 1)
    kept = int((target != kwargs.get("ignore_index", -100)).sum())
    count = kept if kwargs.get("reduction", "mean") == "sum" else 1
    magnitude = float(input.double().abs().max())
    return tolerance(input.dtype, magnitude, C, count, float64_throughout=float64_throughout)


def check_against_pytorch(kata, case, input, target, *, float64_throughout=False, **kwargs) -> None:
    want = reference(input, target, **kwargs)
    compare = comparing(input, target, float64_throughout=float64_throughout, **kwargs)
    with LOSS.judging(kata, input, target, sizes=sizes(case), **kwargs) as call:
        compare(call["loss"], want, call=call.text, what="loss")


def check_gradient(kata, case, input, target, upstream, *, float64_throughout=False, **kwargs) -> None:
    """Autograd through the kata against autograd through F.cross_entropy, both in float64."""
    twin = input.clone().requires_grad_()
    (F.cross_entropy(twin, target, **kwargs) * upstream).sum().backward()
    tolerance_ = GRADIENT_TOLERANCES[core_dtype(input.dtype, float64_throughout)]
    with LOSS.judging_gradients(kata, input, target, wrt=(0,), upstream=upstream, sizes=sizes(case), **kwargs) as got:
        call = LOSS.text("cross_entropy", (input, target), kwargs) + ".backward"
        what = "the gradient of `input`"
        assert_close(got[what], twin.grad, call=call, what=what, tolerance=tolerance_)


def comparing(input, target, *, float64_throughout=False, **kwargs):
    """compare(got, want, call=, what=) within this call's tolerance (see allowed())."""
    tolerance_ = allowed(input, target, float64_throughout=float64_throughout, **kwargs)
    return lambda got, want, *, call, what: assert_close(got, want, call=call, what=what, tolerance=tolerance_)


def reduction_kwargs(reduction: str) -> dict:
    """reduction passed explicitly, except "mean", the default, which is left out."""
    return {} if reduction == "mean" else {"reduction": reduction}


def benchmark(kata, device):
    """(kata call, reference call) at a language model's size: logits [8, 128, 4096] passed as
    logits.transpose(1, 2), float32, about 10% of the targets ignored (-100, padding)."""
    gen = torch.Generator().manual_seed(0)
    B, T, V = 8, 128, 4096
    logits = randn(gen, B, T, V, device=device, std=ORDINARY)
    target = torch.randint(V, (B, T), generator=gen)
    target = target.masked_fill(torch.rand(B, T, generator=gen) < 0.1, -100).to(device)
    return (lambda: kata.cross_entropy(logits.transpose(1, 2), target)), (
        lambda: F.cross_entropy(logits.transpose(1, 2), target)
    )


SPEC = KataSpec(
    kata="cross_entropy",
    symbol="cross_entropy",
    reference="F.cross_entropy in float64, rounded to the input's dtype",
    forbidden=CROSS_ENTROPY,
    tolerances={
        dtype: tolerance(dtype, float64_throughout=True)
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    },
    tolerance_note=(
        f"atol times (max|logit| + log C), times the non-ignored count for a sum: {ROUNDING} eps of the "
        "computation dtype (float64's for float64, float32's for the others), so float32 arithmetic at "
        "the logits' magnitude is accepted; half precision adds two ulps of rtol; solutions and variants "
        "measured at most 0.34 of it (0.48 in half precision)"
    ),
    cases=CASES,
    benchmark=benchmark,
)
LOSS = FunctionKata(
    SPEC,
    outputs="loss",
    parameters={"cross_entropy": ("input", "target", "ignore_index", "reduction", "label_smoothing")},
)


# --------------------------------------------------------------------------- the math


@core(zh="每种 reduction 都与 PyTorch 一致")
@dtypes(*FULL)
def test_matches_pytorch_for_every_reduction(kata, rng, gen, dtype, device):
    """Reductions "none" (ignored positions give 0), "sum", and "mean" over the non-ignored positions;
    the defaults: reduction "mean", ignore_index -100."""
    for case in CASES.cases(rng):
        with case.judged():
            input, target = make_logits(gen, case, dtype, device), make_target(gen, case, device=device)
            for reduction in REDUCTIONS:
                check_against_pytorch(kata, case, input, target, **reduction_kwargs(reduction))


@core(zh="自定义的 ignore_index 即使是一个类别也会被遵守")
@dtypes(*FULL)
def test_a_custom_ignore_index_is_honoured_even_when_it_is_a_class(kata, rng, gen, dtype, device):
    """ignore_index the first class, the last, one strictly between, or outside the classes
    (-1), in turn over the cases, so every run tries each: a legal class index is skipped at
    every position holding it."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            ignore_index = custom_ignore_index(rng, case, IGNORE_KINDS[index % len(IGNORE_KINDS)])
            input = make_logits(gen, case, dtype, device)
            target = make_target(gen, case, ignore_index, device, p_ignore=0.4)
            # "mean" first: under "none" a position holding ignore_index 0 gets the same wrong
            # loss whether ignore_index was overlooked or ignored positions were never zeroed
            for reduction in ("mean", "sum", "none"):
                check_against_pytorch(kata, case, input, target, ignore_index=ignore_index, reduction=reduction)


@core(zh="label_smoothing 混入对所有类别取的平均")
@dtypes(*FULL)
def test_label_smoothing_mixes_in_the_mean_over_all_classes(kata, rng, gen, dtype, device):
    """(1 - eps) * nll + eps * mean over all C classes of -log p, at non-ignored positions only."""
    for case in CASES.cases(rng):
        with case.judged():
            smoothing = rng.choice((0.1, round(rng.uniform(0.05, 0.95), 3)))
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            input = make_logits(gen, case, dtype, device)
            target = make_target(gen, case, ignore_index, device, p_ignore=0.4)
            for reduction in REDUCTIONS:
                kwargs = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": smoothing}
                check_against_pytorch(kata, case, input, target, **kwargs)


def check_large_logits(kata, rng, gen, dtype, device) -> None:
    for case in CASES.cases(rng):
        with case.judged():
            input, target = make_logits(gen, case, dtype, device, large=True), make_target(gen, case, device=device)
            for reduction in REDUCTIONS:
                smoothing = rng.choice((0.0, 0.2))
                kwargs = {"reduction": reduction} | ({"label_smoothing": smoothing} if smoothing else {})
                check_against_pytorch(kata, case, input, target, **kwargs)


@core(zh="logits 大到 1e4 时既不上溢也不下溢")
@dtypes(*FULL)
def test_logits_as_large_as_1e4_neither_overflow_nor_underflow(kata, rng, gen, dtype, device):
    """exp(1e4) overflows even float64: subtract each position's own max. Positions sit up to
    14000 apart, so a max over the whole tensor underflows whole positions, and log(softmax)
    underflows to log(0) = -inf."""
    check_large_logits(kata, rng, gen, dtype, device)


# --------------------------------------------------------------------------- conventions

HALF_RULE = (
    "float16 and bfloat16 inputs are computed in float32 (or better) and the loss is returned in the input's dtype."
)


@convention(HALF_RULE, zh="半精度返回输入的 dtype")
@dtypes(*HALF)
def test_half_precision_returns_the_input_dtype(kata, rng, gen, dtype, device):
    """float16 and bfloat16 logits: computed in float32 or better, returned in their own dtype."""
    for case in CASES.cases(rng):
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            input = make_logits(gen, case, dtype, device)
            target = make_target(gen, case, ignore_index, device)
            for reduction in REDUCTIONS:
                kwargs = {"ignore_index": ignore_index, "reduction": reduction}
                check_against_pytorch(kata, case, input, target, **kwargs, label_smoothing=rng.choice((0.0, 0.1)))


@convention(HALF_RULE, zh="半精度下的大 logits 既不上溢也不下溢")
@dtypes(*HALF)
def test_large_logits_in_half_precision_neither_overflow_nor_underflow(kata, rng, gen, dtype, device):
    """The large logits of the core test, in float16 and bfloat16."""
    check_large_logits(kata, rng, gen, dtype, device)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The loss (ordinary and large logits) and autograd's gradient, held to float64's own tolerances."""
    for case in CASES.cases(rng, 2):
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            target = make_target(gen, case, ignore_index)
            for large in (False, True):
                input = make_logits(gen, case, torch.float64, large=large)
                for reduction in REDUCTIONS:
                    kwargs = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": 0.1}
                    check_against_pytorch(kata, case, input, target, float64_throughout=True, **kwargs)
    check_gradients(kata, rng, gen, (CASES.edges[0], *CASES.random(rng, 1)), float64_throughout=True)


def check_gradients(kata, rng, gen, cases, *, float64_throughout=False) -> None:
    """Every reduction, with ignored positions, with and without label smoothing."""
    for case in cases:
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            input = make_logits(gen, case, torch.float64)
            target = make_target(gen, case, ignore_index)
            for reduction in REDUCTIONS:
                kwargs = {"ignore_index": ignore_index, "reduction": reduction}
                kwargs["label_smoothing"] = rng.choice((0.0, 0.25))
                shape = target.shape if reduction == "none" else torch.Size()
                upstream = randn(gen, shape.numel(), dtype=torch.float64).reshape(shape)
                check_gradient(kata, case, input, target, upstream, float64_throughout=float64_throughout, **kwargs)


@convention(
    "gradients flow back to `input` as autograd through F.cross_entropy's would "
    "(no .detach(), .item() or torch.no_grad() on the way).",
    zh="梯度像经过 PyTorch 的 autograd 一样回传到 input",
)
def test_gradients_flow_back_to_the_input_like_autograd_through_pytorch(kata, rng, gen):
    """Autograd through the kata in float64 against autograd through F.cross_entropy: every
    reduction, with ignored positions, with and without label smoothing."""
    check_gradients(kata, rng, gen, (CASES.edges[0], *CASES.random(rng, 2)))


@convention(
    "when every target is ignored, \"sum\" gives 0 and \"none\" 0 at every position.",
    zh='所有目标都被忽略时，"sum" 为 0，"none" 处处为 0',
)
def test_when_every_target_is_ignored_sum_is_0_and_none_all_zeros(kata, rng, gen):
    """No position counts: "sum" is 0 and "none" gives 0 everywhere (a "mean" would be 0 / 0: not judged)."""
    case = CASES.random(rng)[0]
    ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
    input = make_logits(gen, case)
    target = torch.full(target_shape(case), ignore_index, dtype=torch.int64)
    for reduction in ("none", "sum"):
        kwargs = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": rng.choice((0.0, 0.1))}
        check_against_pytorch(kata, case, input, target, **kwargs)


@convention("any other reduction raises ValueError, as F.cross_entropy does.", zh="未知的 reduction 抛出 ValueError")
def test_an_unknown_reduction_raises_value_error(kata, rng, gen):
    case = CASES.random(rng)[0]
    input, target = make_logits(gen, case), make_target(gen, case)
    reduction = rng.choice(("average", "batchmean", "Mean", "mean "))
    LOSS.assert_raises(
        kata,
        ValueError,
        input,
        target,
        reduction=reduction,
        reason=pick(
            'as F.cross_entropy raises: the reductions are "none", "sum" and "mean"',
            '与 F.cross_entropy 一样：reduction 只能是 "none"、"sum" 或 "mean"',
        ),
    )


@convention("the loss is on the input's device (masks and counts made inside too).", zh="结果跟随输入所在的设备")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """Masks and counts made inside the kata must be made on the input's device."""
    for case in (CASES.edges[0], CASES.edges[2]):  # fixed: a verdict on the meta stand-in must not depend on the seed
        for reduction in REDUCTIONS:
            kwargs = {"reduction": reduction, "label_smoothing": 0.1}

            def make(device, case=case, kwargs=kwargs):
                gen = torch.Generator().manual_seed(0)
                return (make_logits(gen, case, torch.float32, device), make_target(gen, case, device=device)), kwargs

            def expected(device, make=make, kwargs=kwargs):
                return {"loss": reference(*make(device)[0], **kwargs)}

            LOSS.on_device(
                kata,
                other_device,
                make=make,
                expected=expected,
                compare=comparing(*make("cpu")[0], **kwargs),
                sizes=sizes(case),
            )


@convention("the inputs are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """In float16 with a transposed input and a custom ignore_index, where a kata may convert
    or fill in place; and in float32."""
    case = CASES.edges[1]
    ignore_index = custom_ignore_index(rng, case)
    for dtype in (torch.float16, torch.float32):
        input, target = make_logits(gen, case, dtype), make_target(gen, case, ignore_index)
        for reduction in REDUCTIONS:
            kwargs = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": 0.1}
            with LOSS.judging(kata, input, target, sizes=sizes(case), **kwargs) as call:
                LOSS.assert_inputs_unchanged(call, (input, target), kwargs)

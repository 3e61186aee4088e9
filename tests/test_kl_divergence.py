"""kl_divergence: kl_div judged against F.kl_div, distillation_loss against its formula, in float64.

kl_div(input, target, reduction, log_target) is compared with F.kl_div on the same
arguments in float64, under every reduction: zeros in the target (0 * log 0 = 0), one-hot
targets, log-probability targets, a target that broadcasts over more rows than the input has
("batchmean" still divides by input.size(0)), 3-D and 0-d inputs. Target 0 where the input
is -inf is undefined (PyTorch gives NaN): never generated.

distillation_loss(student, teacher, T, direction) is compared with the formula composed from
F.log_softmax and F.kl_div in float64 (Hinton et al. 2015: KL at temperature T times T**2,
"batchmean" over every row of the flattened logits), both directions; its gradient reaches
the student's logits as autograd through that formula, and never the teacher's.

Tolerances: see `kl_tolerance` and `distillation_tolerance` below, measured figures above them.
"""

import warnings

import torch
import torch.nn.functional as F

from judge.forbidden import KL_DIVERGENCE
from judge.language import pick, tr
from judge.testing.checks import assert_close, check_tensor_kind
from judge.testing.diagnosis import diagnosing
from judge.testing.functions import FunctionKata, differentiated
from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core

FULL = (torch.float32, torch.float64)
REDUCTIONS = ("none", "sum", "mean", "batchmean")
DIRECTIONS = ("forward", "reverse")
GRAD_S, GRAD_T = "the gradient of `student_logits`", "the gradient of `teacher_logits`"


# --------------------------------------------------------------------------- tolerances

# (rtol, atol) from the dtype the result is judged as and the size M of what it sums:
#   kl_div:        rtol = ROUND * eps, atol = SHIFT * eps * M, M the reduction (as asked)
#                  of |target log target| + |target * input| + |target| (exp(target) times
#                  |target| + |input| + 1 with log_target): the two terms cancel, each
#                  rounded, and a float32 step (allowed in the core tier) first rounds the
#                  inputs, which moves a term by up to (|log t| + 1) |t| eps/2: without the
#                  |target| term, float64 inputs computed in float32 failed the core tier where
#                  t is near 1 and x near 0 (seed 291675, 2026-11-29);
#   distillation:  rtol = ROUND * eps, atol = SHIFT * eps * T**2 * (A + M), A = max(1,
#                  max |logits| / T) (log_softmax rounds at the scale of the logits, as the
#                  softmax kata measured), M the mean over rows of sum p (|log p| + |log q|);
#                  its gradient: atol = GRADIENT_SHIFT * eps * T * A / N, rtol = ROUND * eps.
# A float64 result is judged as float32 in the core tier (FLOAT64_RULE).
# Measured over 100 seeds x every case of both tables in float32 and float64, worst error as
# a fraction of the allowed one, for the solution, both variants and Hugging Face's DistilBERT
# distiller glued to the signature: kl_div 0.13 (float32; float64 as float32 0.013),
# distillation 0.11 (float32) and 0.11 (float64 as float32), its gradient 0.21 (float32) and
# 0.14 (float64 as float32).
ROUND = 8
SHIFT = 4
GRADIENT_SHIFT = 16


def kl_magnitude(input: torch.Tensor, target: torch.Tensor, reduction: str, log_target: bool) -> float:
    """M for kl_div: the size of the terms that cancel, reduced as the call reduces."""
    x, t = input.double(), target.double()
    if log_target:
        size = t.exp() * (t.abs() + x.abs() + 1)
    else:
        size = torch.xlogy(t, t).abs() + (t * x).abs() + t.abs()
    if size.numel() == 0:
        return 0.0
    if reduction == "none":
        return float(size.max())
    if reduction == "mean":
        return float(size.mean())
    return float(size.sum()) / (input.size(0) if reduction == "batchmean" and input.dim() else 1)


def kl_tolerance(input, target, reduction, log_target, *, float64_throughout=False) -> dict:
    eps = torch.finfo(core_dtype(input.dtype, float64_throughout)).eps
    return {"rtol": ROUND * eps, "atol": SHIFT * eps * kl_magnitude(input, target, reduction, log_target)}


def distillation_scales(student, teacher, temperature: float, direction: str) -> tuple[float, float, int]:
    """(A, M, N) of the tolerance comment above, from the float64 formula."""
    vocab = student.size(-1)
    s, t = (z.detach().double().reshape(-1, vocab) / temperature for z in (student, teacher))
    amplitude = max(1.0, float(s.abs().max()), float(t.abs().max()))
    log_p, log_q = F.log_softmax(t, -1), F.log_softmax(s, -1)
    if direction == "reverse":
        log_p, log_q = log_q, log_p
    size = float((log_p.exp() * (log_p.abs() + log_q.abs())).sum(-1).mean())
    return amplitude, size, s.size(0)


def distillation_tolerance(student, teacher, temperature, direction, *, float64_throughout=False) -> dict:
    eps = torch.finfo(core_dtype(student.dtype, float64_throughout)).eps
    amplitude, size, _ = distillation_scales(student, teacher, temperature, direction)
    return {"rtol": ROUND * eps, "atol": SHIFT * eps * temperature**2 * (amplitude + size)}


def gradient_tolerance(student, teacher, temperature, direction, *, float64_throughout=False) -> dict:
    eps = torch.finfo(core_dtype(student.dtype, float64_throughout)).eps
    amplitude, _, rows = distillation_scales(student, teacher, temperature, direction)
    return {"rtol": ROUND * eps, "atol": GRADIENT_SHIFT * eps * temperature * amplitude / rows}


# --------------------------------------------------------------------------- the case tables

# kl_div: shape (the input's), target_shape (the target's, None: the same), zeros (the
# fraction of target entries that are 0), log_target.
# fmt: off
KL_EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("zeros in the target: 0 * log 0 = 0", "目标中有零：0 * log 0 = 0",
         shape=[4, 7], target_shape=None, zeros=0.3, log_target=False),
    edge("log_target: log-probabilities in the target", "log_target：目标是对数概率",
         shape=[5, 6], target_shape=None, zeros=0.0, log_target=True),
    edge("the target broadcasts the input [5] over 4 rows: batchmean divides by 5",
         "目标把输入 [5] 广播到 4 行：batchmean 除以 5",
         shape=[5], target_shape=[4, 5], zeros=0.0, log_target=False),
    edge("3-D input [2, 3, 4]: batchmean divides by 2", "三维输入 [2, 3, 4]：batchmean 除以 2",
         shape=[2, 3, 4], target_shape=None, zeros=0.0, log_target=False),
    edge("one-hot targets", "独热目标",
         shape=[3, 6], target_shape=None, zeros=1.0, log_target=False),
    edge("a 0-d input and target", "0 维的输入与目标",
         shape=[], target_shape=None, zeros=0.0, log_target=False),
)
# distillation_loss: shape [..., V], temperature, scale (the logits' standard deviation).
DISTILLATION_EDGES = (
    edge("3-D logits [2, 3, 5]: batchmean over the 6 rows", "三维 logits [2, 3, 5]：batchmean 对 6 行求平均",
         shape=[2, 3, 5], temperature=1.0, scale=2.0),
    edge("temperature 4: the T**2 factor", "温度为 4：T**2 因子",
         shape=[4, 6], temperature=4.0, scale=3.0),
    edge("logits up to +-1e4: log_softmax, not log(softmax)", "logits 可达 +-1e4：用 log_softmax，而不是 log(softmax)",
         shape=[3, 7], temperature=2.0, scale=1e4),
    edge("a single row of two", "只有一行、两个类别",
         shape=[1, 2], temperature=1.0, scale=2.0),
)
# fmt: on


def kl_draws(rng, count: int) -> list[dict]:
    """1 to 3 dims of sizes 1 to 9, the target the same shape, some zeros, log_target either way."""
    cases = []
    for _ in range(count):
        shape = [rng.randint(1, 9) for _ in range(rng.randint(1, 3))]
        log_target = rng.random() < 0.3
        zeros = 0.0 if log_target else rng.choice((0.0, 0.2, 0.5))
        cases.append({"shape": shape, "target_shape": None, "zeros": zeros, "log_target": log_target})
    return cases


def distillation_draws(rng, count: int) -> list[dict]:
    """[..., V] with 1 or 2 leading dims, V from 2 to 20, T from 0.5 to 8, logits of std 1 to 8."""
    cases = []
    for _ in range(count):
        shape = [rng.randint(1, 6) for _ in range(rng.randint(1, 2))] + [rng.randint(2, 20)]
        cases.append(
            {"shape": shape, "temperature": rng.choice((0.5, 1.0, 2.0, 4.0, 8.0)), "scale": rng.choice((1.0, 3.0, 8.0))}
        )
    return cases


KL_CASES = CaseTable(draw=kl_draws, edges=KL_EDGES, draws=3)
DISTILLATION_CASES = CaseTable(draw=distillation_draws, edges=DISTILLATION_EDGES, draws=3)


def make_kl_inputs(gen, case, dtype, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target): log-probabilities along the last dim, and probabilities (or their logs)
    with case["zeros"] of them 0 (1.0: one-hot), each row still summing to 1."""
    shape, target_shape = list(case["shape"]), list(case["target_shape"] or case["shape"])
    input = F.log_softmax(randn(gen, *shape, dtype=torch.float64, std=2.0), dim=-1) if shape else -randn(gen).abs()
    logits = randn(gen, *target_shape, dtype=torch.float64, std=2.0)
    if case["zeros"] >= 1.0 and target_shape:
        target = F.one_hot(logits.argmax(-1), target_shape[-1]).double()
    elif target_shape:
        blocked = torch.rand(target_shape, generator=gen) < case["zeros"]
        blocked = blocked.scatter(-1, logits.argmax(-1, keepdim=True), False)  # a nonzero entry in every row
        target = F.softmax(logits.masked_fill(blocked, float("-inf")), dim=-1)
    else:
        target = torch.rand((), generator=gen, dtype=torch.float64)
    if case["log_target"]:
        target = target.log()
    return input.to(dtype=dtype, device=device), target.to(dtype=dtype, device=device)


def make_logits(gen, case, dtype, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(student_logits, teacher_logits) of case["shape"] and case["scale"]."""
    student = randn(gen, *case["shape"], dtype=torch.float64, std=case["scale"])
    teacher = randn(gen, *case["shape"], dtype=torch.float64, std=case["scale"])
    return student.to(dtype=dtype, device=device), teacher.to(dtype=dtype, device=device)


# --------------------------------------------------------------------------- references


def kl_reference(input, target, reduction: str, log_target: bool) -> torch.Tensor:
    """F.kl_div in float64 (its warning that "mean" is not the KL per sample is about the very
    convention asked for)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return F.kl_div(input.double(), target.double(), reduction=reduction, log_target=log_target).to(input.dtype)


def distillation_reference(student, teacher, temperature: float, direction: str) -> torch.Tensor:
    """Hinton's loss composed from F.log_softmax and F.kl_div (log_target), float64."""
    vocab = student.size(-1)
    log_s = F.log_softmax(student.double().reshape(-1, vocab) / temperature, dim=-1)
    log_t = F.log_softmax(teacher.detach().double().reshape(-1, vocab) / temperature, dim=-1)
    input, target = (log_s, log_t) if direction == "forward" else (log_t, log_s)
    return F.kl_div(input, target, reduction="batchmean", log_target=True) * temperature**2


# --------------------------------------------------------------------------- calls


def check_kl(kata, input, target, reduction: str, log_target: bool, *, float64_throughout=False) -> None:
    kwargs = {"reduction": reduction, "log_target": log_target}
    allowed = kl_tolerance(input, target, reduction, log_target, float64_throughout=float64_throughout)
    want = kl_reference(input, target, reduction, log_target)
    with KL.judging(kata, input, target, symbol="kl_div", sizes={"shape": list(input.shape)}, **kwargs) as call:
        check_tensor_kind(call["loss"], want, call=call.text, what="loss")
        assert_close(call["loss"], want, call=call.text, what="loss", tolerance=allowed)


def check_distillation(kata, student, teacher, temperature, direction, *, float64_throughout=False) -> None:
    allowed = distillation_tolerance(student, teacher, temperature, direction, float64_throughout=float64_throughout)
    want = distillation_reference(student, teacher, temperature, direction).to(student.dtype)
    sizes = {"shape": list(student.shape), "T": temperature}
    with KL.judging(
        kata, student, teacher, temperature, symbol="distillation_loss", sizes=sizes, direction=direction
    ) as call:
        check_tensor_kind(call["loss"], want, call=call.text, what="loss")
        assert_close(call["loss"], want, call=call.text, what="loss", tolerance=allowed)


def distillation_gradients(implementation, student, teacher, temperature, direction, upstream) -> dict:
    """{GRAD_S: the student's gradient (None if none), GRAD_T: the teacher's (zeros if none)}."""
    args, kwargs = (student, teacher, temperature), {"direction": direction}
    got = differentiated(implementation, "distillation_loss", args, kwargs, (0, 1), upstream, None)
    grads = got["grads"]
    teacher_grad = grads.get(1)
    return {GRAD_S: grads.get(0), GRAD_T: torch.zeros_like(teacher) if teacher_grad is None else teacher_grad}


def check_distillation_gradients(kata, student, teacher, temperature, direction, *, float64_throughout=False) -> None:
    """The student's gradient as autograd through the float64 formula; none for the teacher."""
    upstream = torch.tensor(1.0, dtype=student.dtype)
    leaf = student.detach().double().requires_grad_()
    distillation_reference(leaf, teacher, temperature, direction).backward()
    want = leaf.grad.to(student.dtype)
    text = KL.text("distillation_loss", (student, teacher, temperature), {"direction": direction}) + ".backward"
    allowed = gradient_tolerance(student, teacher, temperature, direction, float64_throughout=float64_throughout)

    def replay(implementation) -> dict:
        return distillation_gradients(implementation, student, teacher, temperature, direction, upstream)

    with diagnosing(KL.kata, replay, {"shape": list(student.shape), "T": temperature}):
        got = replay(kata)
        if got[GRAD_S] is None:
            raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text, name="student_logits"))
        assert_close(got[GRAD_S], want, call=text, what=GRAD_S, tolerance=allowed)
        exactly = {"rtol": 0.0, "atol": 0.0}
        assert_close(got[GRAD_T], torch.zeros_like(teacher), call=text, what=GRAD_T, tolerance=exactly, hint=TEACHER)


TEACHER = pick(
    "The teacher is a constant: detach teacher_logits (or take its probabilities under torch.no_grad())",
    "教师是常量：对 teacher_logits 调用 detach（或在 torch.no_grad() 下计算它的概率）",
)


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: distillation over 4 sequences of 128
    tokens and a vocabulary of 4096, T = 2, float32, against the formula with F.kl_div."""
    gen = torch.Generator().manual_seed(0)
    student, teacher = (randn(gen, 4, 128, 4096, device=device, std=2.0) for _ in range(2))

    def reference():
        log_s = F.log_softmax(student.reshape(-1, 4096) / 2.0, dim=-1)
        log_t = F.log_softmax(teacher.reshape(-1, 4096) / 2.0, dim=-1)
        return F.kl_div(log_s, log_t, reduction="batchmean", log_target=True) * 4.0

    return (lambda: kata.distillation_loss(student, teacher, 2.0)), reference


SPEC = KataSpec(
    kata="kl_divergence",
    symbol="kl_div",
    reference="F.kl_div in float64 (every reduction, log_target); distillation: F.log_softmax and F.kl_div, T**2",
    forbidden=KL_DIVERGENCE,
    also={"distillation_loss": KL_DIVERGENCE},
    tolerances={
        dtype: {"rtol": ROUND * torch.finfo(dtype).eps, "atol": SHIFT * torch.finfo(dtype).eps} for dtype in FULL
    },
    tolerance_note=(
        "shown for terms up to 1 in size: atol scales with what the result sums (|t log t| + |t x| for kl_div; "
        "T**2 times the logits' size over T plus the cross-entropy for distillation): the solution and variants "
        "measured at most 0.21 of these"
    ),
    cases=KL_CASES,
    benchmark=benchmark,
)
KL = FunctionKata(
    SPEC,
    outputs="loss",
    parameters={
        "kl_div": ("input", "target", "reduction", "log_target"),
        "distillation_loss": ("student_logits", "teacher_logits", "temperature"),
    },
)


# --------------------------------------------------------------------------- the math


@core(zh="kl_div 在每种 reduction 下都与 F.kl_div 一致")
@dtypes(*FULL)
def test_kl_div_matches_pytorch_under_every_reduction(kata, rng, gen, dtype, device):
    for case in KL_CASES.cases(rng):
        with case.judged():
            input, target = make_kl_inputs(gen, case, dtype, device)
            for reduction in REDUCTIONS:
                check_kl(kata, input, target, reduction, case["log_target"])


@core(zh="reduction 默认为 'mean'，log_target 默认为 False")
def test_kl_div_defaults_to_mean_over_probabilities(kata, rng, gen):
    case = KL_CASES.random(rng)[0] | {"log_target": False, "zeros": 0.2}
    input, target = make_kl_inputs(gen, case, torch.float32)
    want = kl_reference(input, target, "mean", False)
    with case.judged(), KL.judging(kata, input, target, symbol="kl_div") as call:
        assert_close(
            call["loss"], want, call=call.text, what="loss", tolerance=kl_tolerance(input, target, "mean", False)
        )


@core(zh="蒸馏损失与公式一致（两个方向）")
@dtypes(*FULL)
def test_distillation_matches_the_formula_in_both_directions(kata, rng, gen, dtype, device):
    for case in DISTILLATION_CASES.cases(rng):
        with case.judged():
            student, teacher = make_logits(gen, case, dtype, device)
            for direction in DIRECTIONS:
                check_distillation(kata, student, teacher, case["temperature"], direction)


@core(zh="梯度只流向学生的 logits，不流向教师的")
@dtypes(*FULL)
def test_the_gradient_reaches_the_student_and_never_the_teacher(kata, rng, gen, dtype):
    for case in (DISTILLATION_EDGES[0], DISTILLATION_EDGES[1], *DISTILLATION_CASES.random(rng, 2)):
        with case.judged():
            student, teacher = make_logits(gen, case, dtype)
            for direction in DIRECTIONS:
                check_distillation_gradients(kata, student, teacher, case["temperature"], direction)


@core(zh="temperature 与 direction 的默认值为 1 和 'forward'")
def test_distillation_defaults_to_temperature_1_forward(kata, rng, gen):
    case = DISTILLATION_CASES.random(rng)[0]
    student, teacher = make_logits(gen, case, torch.float32)
    want = distillation_reference(student, teacher, 1.0, "forward").float()
    with case.judged(), KL.judging(kata, student, teacher, symbol="distillation_loss") as call:
        assert_close(
            call["loss"],
            want,
            call=call.text,
            what="loss",
            tolerance=distillation_tolerance(student, teacher, 1.0, "forward"),
        )


# --------------------------------------------------------------------------- conventions


@convention("any other reduction raises ValueError.", zh="其他 reduction 抛出 ValueError")
def test_an_unknown_reduction_raises_value_error(kata, rng, gen):
    input, target = make_kl_inputs(gen, KL_CASES.random(rng)[0], torch.float32)
    for reduction in ("average", "elementwise_mean", "Mean"):
        KL.assert_raises(
            kata, ValueError, input, target, reduction=reduction, symbol="kl_div", reason=f"reduction={reduction!r}"
        )


@convention(
    "temperature <= 0 raises ValueError, and so does any other direction.",
    zh="temperature <= 0 或其他 direction 抛出 ValueError",
)
def test_a_bad_temperature_or_direction_raises_value_error(kata, rng, gen):
    student, teacher = make_logits(gen, DISTILLATION_CASES.random(rng)[0], torch.float32)
    for temperature in (0.0, -1.0):
        KL.assert_raises(
            kata,
            ValueError,
            student,
            teacher,
            temperature,
            symbol="distillation_loss",
            reason=f"temperature={temperature}",
        )
    for direction in ("backward", "kl", "Forward"):
        KL.assert_raises(
            kata,
            ValueError,
            student,
            teacher,
            2.0,
            direction=direction,
            symbol="distillation_loss",
            reason=f"direction={direction!r}",
        )


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """Both functions' values, and the student's gradient, held to float64's own tolerances."""
    for case in (KL_EDGES[0], *KL_CASES.random(rng, 2)):
        with case.judged():
            input, target = make_kl_inputs(gen, case, torch.float64)
            for reduction in REDUCTIONS:
                check_kl(kata, input, target, reduction, case["log_target"], float64_throughout=True)
    for case in (DISTILLATION_EDGES[1], *DISTILLATION_CASES.random(rng, 2)):
        with case.judged():
            student, teacher = make_logits(gen, case, torch.float64)
            for direction in DIRECTIONS:
                check_distillation(kata, student, teacher, case["temperature"], direction, float64_throughout=True)
                check_distillation_gradients(
                    kata, student, teacher, case["temperature"], direction, float64_throughout=True
                )


@convention("input and target are never changed in place.", zh="kl_div 不修改输入")
def test_kl_div_leaves_its_inputs_alone(kata, rng, gen):
    case = KL_CASES.random(rng)[0]
    for dtype in FULL:
        input, target = make_kl_inputs(gen, case, dtype)
        for reduction in REDUCTIONS:
            kwargs = {"reduction": reduction, "log_target": case["log_target"]}
            with KL.judging(kata, input, target, symbol="kl_div", **kwargs) as call:
                KL.assert_inputs_unchanged(call, (input, target), kwargs, symbol="kl_div")


@convention("the logits are never changed in place.", zh="蒸馏损失不修改 logits")
def test_distillation_leaves_the_logits_alone(kata, rng, gen):
    case = DISTILLATION_CASES.random(rng)[0]
    for dtype in FULL:
        student, teacher = make_logits(gen, case, dtype)
        for direction in DIRECTIONS:
            args = (student, teacher, case["temperature"])
            with KL.judging(kata, *args, symbol="distillation_loss", direction=direction) as call:
                KL.assert_inputs_unchanged(call, args, {"direction": direction}, symbol="distillation_loss")

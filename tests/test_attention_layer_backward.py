"""attention_layer_backward: hand-written gradients of a multi-head self-attention layer,
judged against autograd in float64.

The judge is autograd through the same forward written here in float64 on the inputs'
device, whatever the kata's dtype: F.linear for the four projections (no biases) and
F.scaled_dot_product_attention per head (is_causal as given), the heads split as
view(B, T, H, hs).transpose(1, 2) and merged back the same way (head h = columns
h*hs:(h+1)*hs). A second judge writes the attention out as softmax(q k^T / sqrt(hs) + a
-inf bias) @ v, without SDPA's kernels. float32 gradients are compared with the exact ones.

Inputs: x and grad_output unit normals, every weight N(0, 1/E) (as nn.Linear's scale), so
Q, K and V have unit entries and the scores a spread near 1: the softmax is not saturated,
and a wrong scale, a missing row-sum term or a missing path shows.

Tolerances grow with cancellation: each gradient is a sum of terms that cancel (the softmax
backward subtracts a row sum; grad_x adds three paths), so a correct kata's error follows
the size of those terms, not of the result. gradient_scales takes each gradient's last
product on absolute values, with grad_Q and grad_K standing for the size of their own terms
(the softmax backward with its row sum added instead of subtracted): the largest element of
each is that gradient's scale, and its atol a multiple of it (see GRAD_TOLERANCES for the
figures measured).

Autograd inside the kata, in any form, is refused by the spec's AUTOGRAD rules (the same
for every backward kata), and so is any result that records a graph: the tests call it
with tensors that do not require grad. Every call runs where the kata lives, on copies
(judge.testing.functions): the references are computed here on the inputs as they were.
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import AUTOGRAD
from judge.language import pick
from judge.testing.checks import assert_close, check_tensor_kind, describe
from judge.testing.functions import FunctionKata
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype

FULL = [torch.float32, torch.float64]
NAMES = ("grad_x", "grad_w_q", "grad_w_k", "grad_w_v", "grad_w_o")
WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
# Judged in this order, each depending on more of the chain than the one before.
ORDER = ("grad_w_o", "grad_w_v", "grad_w_q", "grad_w_k", "grad_x")

# rtol covers each element's final rounding; atol is per unit of the gradient's scale (the
# largest of the terms it sums, see gradient_scales). Measured over 200 seeds x the 8 cases
# of the table (the edge cases included), causal and not, on the solution and both
# variants, against the SDPA reference (and the eager one in float64): the atol needed
# beyond rtol was at most 2.4e-7 per unit of scale in float32 (grad_w_v; 1e-6: 4.2x) and
# 5.4e-16 in float64 (3e-15: 5.5x); every result within 0.24 (float32) and 0.19 (float64)
# of its whole tolerance. At B 4, T 128, E 128 the error per unit of scale stays the same
# (about 2.6e-7 in float32), where a fixed atol would have to grow. Every slip of
# tests/mutants is off by at least 4000x its float32 tolerance wherever it is wrong.
GRAD_TOLERANCES = per_dtype(float64=(1e-14, 3e-15), float32=(1.3e-6, 1e-6))


def grad_tolerance(dtype: torch.dtype, scale: float, *, float64_throughout: bool = False) -> dict:
    """One gradient's tolerance: atol per unit of `scale`, the size of the terms it sums.
    A float64 result gets float32's unless float64_throughout (see spec.FLOAT64_RULE)."""
    tolerance = GRAD_TOLERANCES[core_dtype(dtype, float64_throughout)]
    return {"rtol": tolerance["rtol"], "atol": tolerance["atol"] * scale}


# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """B batch, T positions, E = H * hs width, H heads: B, T and E all differ, and the head
    size differs from the head count. The first draw has at least two heads."""
    cases = []
    for index in range(count):
        H = rng.randint(2, 4) if index == 0 else rng.randint(1, 4)
        hs = rng.choice([n for n in range(2, 8) if n != H])
        E = H * hs
        B = rng.choice([n for n in (2, 3, 4) if n != E])
        T = rng.choice([n for n in range(2, 12) if n not in (B, E)])
        cases.append({"B": B, "T": T, "E": E, "H": H})
    return cases


# Named edge cases, run every time: the most telling first (the first failure shown is the
# first edge case that fails).
EDGES = (
    # several heads of an odd size, B, T and E all different: heads merged in the wrong
    # order, a scale of 1/sqrt(E), a transposed weight gradient all show
    edge("odd sizes, three heads of size 5", "奇数尺寸，三个大小为 5 的头", B=3, T=7, E=15, H=3),
    # one key per query: the softmax's gradient vanishes, only the value path reaches x
    edge("one position: only the value path reaches x", "只有一个位置：只有值这条路径传到 x", B=2, T=1, E=8, H=2),
    edge("head size 1", "头大小为 1", B=2, T=5, E=4, H=4),
    edge("one head", "只有一个头", B=3, T=6, E=5, H=1),
    # nothing to sum over the batch: a per-batch-row weight gradient keeps a dim of 1
    edge("one sequence", "只有一个序列", B=1, T=9, E=6, H=2),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


# --------------------------------------------------------------------------- inputs


def make_args(gen, case, dtype, device) -> dict:
    """x and grad_output unit normals, every weight N(0, 1/E): the same numbers for every dtype."""
    B, T, E = case["B"], case["T"], case["E"]
    args = {"x": randn(gen, B, T, E, dtype=dtype, device=device)}
    for name in WEIGHTS:
        args[name] = randn(gen, E, E, dtype=dtype, device=device, std=1 / math.sqrt(E))
    args["num_heads"] = case["H"]
    args["grad_output"] = randn(gen, B, T, E, dtype=dtype, device=device)
    return args


def sizes_of(args: dict) -> dict:
    B, T, E = args["x"].shape
    return {"B": B, "T": T, "E": E, "H": args["num_heads"]}


# --------------------------------------------------------------------------- references


def _split(t: torch.Tensor, H: int) -> torch.Tensor:  # (B, T, E) -> (B, H, T, hs)
    B, T, E = t.shape
    return t.view(B, T, H, E // H).transpose(1, 2)


def _merge(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, hs) -> (B, T, E)
    B, H, T, hs = t.shape
    return t.transpose(1, 2).reshape(B, T, H * hs)


def sdpa_attention(q, k, v, is_causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def eager_attention(q, k, v, is_causal):
    """softmax(q k^T / sqrt(hs) + bias) @ v, the bias -inf strictly above the diagonal."""
    T, hs = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    if is_causal:
        scores = scores + torch.full((T, T), -math.inf, dtype=q.dtype, device=q.device).triu(1)
    return torch.softmax(scores, dim=-1) @ v


def reference_gradients(args: dict, is_causal=False, attention=sdpa_attention) -> dict:
    """Autograd through the layer in float64 on the inputs' device, rounded to x's dtype."""
    H, dtype = args["num_heads"], args["x"].dtype
    leaves = [args[name].detach().double().requires_grad_() for name in ("x", *WEIGHTS)]
    x, w_q, w_k, w_v, w_o = leaves
    with torch.enable_grad():
        heads = attention(*(_split(F.linear(x, w), H) for w in (w_q, w_k, w_v)), is_causal)
        y = F.linear(_merge(heads), w_o)
        grads = torch.autograd.grad(y, leaves, args["grad_output"].double())
    return dict(zip(("grad_x", "grad_w_q", "grad_w_k", "grad_w_v", "grad_w_o"), (g.to(dtype) for g in grads)))


@torch.no_grad()
def gradient_scales(args: dict, is_causal=False) -> dict:
    """The size of the terms each gradient sums, in float64, which a correct kata's rounding
    error follows (the terms cancel: at T = 1 grad_w_q is exactly 0). Each gradient's last
    product taken on absolute values (|grad_output|^T @ |merged| for grad_w_o, say), where
    grad_Q and grad_K stand for the size of their own terms: the softmax backward
    weights * (grad_weights - rowsum(grad_weights * weights)) with the row sum added
    instead of subtracted, then times |K| (|Q|) and the scale. The largest element of each."""
    H = args["num_heads"]
    x, w_q, w_k, w_v, w_o, g = (args[n].double() for n in ("x", *WEIGHTS, "grad_output"))
    B, T, E = x.shape
    hs = E // H
    q, k, v = (_split(x @ w.T, H) for w in (w_q, w_k, w_v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), -math.inf)
    p = torch.softmax(scores, dim=-1)  # (B, H, T, T)
    grad_heads = _split(g @ w_o, H)
    grad_p = grad_heads @ v.transpose(-2, -1)
    terms_s = p * (grad_p.abs() + (grad_p * p).sum(-1, keepdim=True).abs())
    terms_q = _merge(terms_s @ k.abs()) / math.sqrt(hs)
    terms_k = _merge(terms_s.transpose(-2, -1) @ q.abs()) / math.sqrt(hs)
    grad_v = _merge(p.transpose(-2, -1) @ grad_heads).abs()
    rows = lambda t: t.reshape(-1, E).abs()  # noqa: E731
    scales = {
        "grad_w_o": rows(g).T @ rows(_merge(p @ v)),
        "grad_w_q": rows(terms_q).T @ rows(x),
        "grad_w_k": rows(terms_k).T @ rows(x),
        "grad_w_v": rows(grad_v).T @ rows(x),
        "grad_x": terms_q @ w_q.abs() + terms_k @ w_k.abs() + grad_v @ w_v.abs(),
    }
    return {name: float(scale.max()) for name, scale in scales.items()}


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call): batch 8, 128 positions, E 512, 8 heads, causal, float32.

    PyTorch has no closed-form backward of an attention layer, so the reference is what
    autograd does for the same job: the same float32 forward (F.linear projections,
    F.scaled_dot_product_attention per head, F.linear out) run with the graph recorded,
    then backward to x and the four weights. The kata recomputes its forward too. The
    grader times under torch.no_grad(), so the reference turns grad on."""
    B, T, E, H = 8, 128, 512, 8
    gen = torch.Generator().manual_seed(0)
    case = {"B": B, "T": T, "E": E, "H": H}
    args = make_args(gen, case, torch.float32, device)
    leaves = [args[name].clone().requires_grad_() for name in ("x", *WEIGHTS)]

    def reference():
        x, w_q, w_k, w_v, w_o = leaves
        with torch.enable_grad():
            heads = F.scaled_dot_product_attention(
                *(_split(F.linear(x, w), H) for w in (w_q, w_k, w_v)), is_causal=True
            )
            return torch.autograd.grad(F.linear(_merge(heads), w_o), leaves, args["grad_output"])

    def mine():
        return kata.attention_layer_backward(**args, is_causal=True)

    return mine, reference


SPEC = KataSpec(
    kata="attention_layer_backward",
    symbol="attention_layer_backward",
    reference="autograd in float64 through the same layer: F.linear projections, "
    "F.scaled_dot_product_attention per head (and the eager formula)",
    forbidden=AUTOGRAD,
    tolerances=GRAD_TOLERANCES,
    tolerance_note=(
        "atol per unit of each gradient's scale, the size of the terms it sums (the softmax backward's "
        "row sum and grad_x's three paths cancel): float32 1e-6, float64 3e-15; the solution and "
        "variants measured at most 0.24 of the whole tolerance in float32 and 0.19 in float64"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- checks

POSITIONAL = ("x", *WEIGHTS, "num_heads", "grad_output")


def gradients(result, text: str) -> dict:
    """The result's form: five gradients, named."""
    if not isinstance(result, (tuple, list)) or len(result) != 5:
        raise AssertionError(
            pick(
                f"{text} returned {describe(result)}; expected five gradients "
                "(grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o)",
                f"{text} 返回了 {describe(result)}；应返回五个梯度 (grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o)",
            )
        )
    return dict(zip(NAMES, result))


LAYER = FunctionKata(SPEC, outputs=gradients, parameters={"attention_layer_backward": POSITIONAL})


def positional(args: dict) -> list:
    return [args[name] for name in POSITIONAL]


HINTS = {
    "grad_w_o": pick(
        "grad_w_o needs only the recomputed forward: check the attention (scale 1/sqrt(hs), the causal "
        "mask), the heads merged back as (B, H, T, hs) -> (B, T, H, hs) -> (B, T, E), and the nn.Linear "
        "convention: y = merged @ w_o^T, so grad_w_o = grad_output^T @ merged, summed over batch and positions.",
        "grad_w_o 只依赖重新计算的前向：检查注意力（缩放 1/sqrt(hs)、因果掩码）、多头按 "
        "(B, H, T, hs) -> (B, T, H, hs) -> (B, T, E) 合并回去，以及 nn.Linear 的约定："
        "y = merged @ w_o^T，所以 grad_w_o = grad_output^T @ merged，对 batch 和各位置求和。",
    ),
    "grad_w_v": pick(
        "grad_w_o is right, so the forward is: check grad_merged = grad_output @ w_o split into heads, "
        "grad_V = weights^T @ that per head, the heads merged back, and grad_w_v = grad_V^T @ x summed over "
        "batch and positions.",
        "grad_w_o 是对的，所以前向也是对的：检查 grad_merged = grad_output @ w_o 拆分成多头、"
        "每个头上 grad_V = weights^T @ 它、多头合并回去，以及 grad_w_v = grad_V^T @ x 对 batch 和各位置求和。",
    ),
    "grad_w_q": pick(
        "grad_w_v is right, so each head's upstream gradient is: check the softmax backward (its "
        "row-sum term), the scale 1/sqrt(hs) in grad_Q, and grad_w_q = grad_Q^T @ x.",
        "grad_w_v 是对的，所以每个头的上游梯度也是对的：检查 softmax 的反向（其中的行和项）、"
        "grad_Q 中的缩放 1/sqrt(hs)，以及 grad_w_q = grad_Q^T @ x。",
    ),
    "grad_w_k": pick(
        "grad_w_q is right, so grad_scores is: check the transpose and the scale in grad_K.",
        "grad_w_q 是对的，所以 grad_scores 也是对的：检查 grad_K 中的转置和缩放。",
    ),
    "grad_x": pick(
        "every weight gradient is right: grad_x sums three paths, grad_Q @ w_q + grad_K @ w_k + "
        "grad_V @ w_v (Q = x @ w_q^T, so it is w_q, not its transpose).",
        "所有权重梯度都是对的：grad_x 是三条路径之和，grad_Q @ w_q + grad_K @ w_k + grad_V @ w_v"
        "（Q = x @ w_q^T，所以乘的是 w_q，而不是它的转置）。",
    ),
}


def judge_gradients(call: str, got: dict, want: dict, scales: dict, *, float64_throughout: bool = False) -> None:
    """Kinds first (each gradient has the shape of what it is the gradient of), then the
    values in ORDER, with a hint for the first one that is off."""
    for name in NAMES:
        check_tensor_kind(got[name], want[name], call=call, what=name)
    for name in ORDER:
        tolerance = grad_tolerance(want[name].dtype, scales[name], float64_throughout=float64_throughout)
        assert_close(got[name], want[name], call=call, what=name, tolerance=tolerance, hint=HINTS[name])


def check_gradients(kata, args: dict, attention=sdpa_attention, *, float64_throughout=False, **kwargs) -> None:
    """The learner's gradients (computed where the kata lives, on copies) against autograd's."""
    want = reference_gradients(args, kwargs.get("is_causal", False), attention)
    scales = gradient_scales(args, kwargs.get("is_causal", False))
    with LAYER.judging(kata, *positional(args), sizes=sizes_of(args), **kwargs) as call:
        judge_gradients(call.text, call.outputs, want, scales, float64_throughout=float64_throughout)


@scenario
def without_grad(kata, args: list, kwargs: dict):
    """attention_layer_backward(*args, **kwargs) under torch.no_grad(), as the grader times it."""
    with torch.no_grad():
        return kata.attention_layer_backward(*args, **kwargs)


# --------------------------------------------------------------------------- core


@core(zh="梯度与经过整层的 autograd 一致")
@dtypes(*FULL)
def test_gradients_match_autograd_through_the_layer(kata, rng, gen, dtype, device):
    """is_causal left to its default (False)."""
    for case in CASES.cases(rng):
        with case.judged():
            check_gradients(kata, make_args(gen, case, dtype, device))


@core(zh="is_causal 让位置 i 看到位置 0 到 i")
@dtypes(*FULL)
def test_is_causal_lets_position_i_see_positions_0_to_i(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng):
        with case.judged():
            check_gradients(kata, make_args(gen, case, dtype, device), is_causal=True)


@core(zh="梯度与按公式逐步写出的 autograd 参考一致")
def test_gradients_match_an_eager_autograd_reference(kata, rng, gen, device):
    """The attention written out (softmax of the scaled scores plus a -inf bias), not SDPA."""
    for index, case in enumerate(CASES.random(rng)):
        with case.judged():
            args = make_args(gen, case, torch.float64, device)
            check_gradients(kata, args, attention=eager_attention, is_causal=index % 2 == 0)


# --------------------------------------------------------------------------- conventions


@convention(
    "it works under torch.no_grad() (the gradients come from your own formulas).",
    zh="在 torch.no_grad() 下也能工作",
)
def test_works_under_no_grad(kata, rng, gen):
    """As the grader times it: no keyword, under torch.no_grad(); the gradients come from
    the learner's own formulas (autograd, in any form, is refused in every test)."""
    for case in CASES.random(rng, 2):
        with case.judged():
            args = make_args(gen, case, torch.float64, "cpu")
            call = LAYER.text("attention_layer_backward", tuple(positional(args)), {})
            text = pick(f"{call} under torch.no_grad()", f"在 torch.no_grad() 下调用 {call}")

            def replay(implementation, args=args, text=text) -> dict:
                return gradients(without_grad(implementation, positional(args), {}), text)

            want, scales = reference_gradients(args), gradient_scales(args)
            with SPEC.diagnosing(replay, sizes_of(args)):
                judge_gradients(text, replay(kata), want, scales)


@convention("raise ValueError when E is not divisible by num_heads.", zh="E 不能被 num_heads 整除时抛出 ValueError")
def test_e_not_divisible_by_num_heads_raises_value_error(kata, rng, gen):
    H = rng.randint(2, 5)
    E = H * rng.randint(2, 4) + rng.randint(1, H - 1)
    args = make_args(gen, {"B": 2, "T": 3, "E": E, "H": H}, torch.float32, "cpu")
    LAYER.assert_raises(
        kata,
        ValueError,
        *positional(args),
        reason=pick(f"E {E} cannot be split evenly into {H} heads", f"E {E} 无法均分成 {H} 个头"),
    )


@convention("results follow the device of x (a causal mask made inside too).", zh="结果的 dtype 和设备与输入一致")
def test_results_follow_the_dtype_and_device_of_the_inputs(kata, other_device):
    """Each gradient has its input's shape, dtype and device (on "meta" without a GPU: no values)."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for dtype in FULL:

        def arguments(device, dtype=dtype) -> dict:
            return make_args(torch.Generator().manual_seed(0), case, dtype, device)

        def expected(device, arguments=arguments) -> dict:
            want = reference_gradients(arguments(device), is_causal=True)
            return {name: want[name] for name in ORDER}

        scales = gradient_scales(arguments("cpu"), is_causal=True)

        def compare(got, want, *, call: str, what: str, scales=scales) -> None:
            assert_close(got, want, call=call, what=what, tolerance=grad_tolerance(want.dtype, scales[what]))

        LAYER.on_device(
            kata,
            other_device,
            make=lambda device, arguments=arguments: (tuple(positional(arguments(device))), {"is_causal": True}),
            expected=expected,
            compare=compare,
            sizes=dict(case),
        )


@convention("the inputs are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every tensor argument, by value, in both dtypes, causal and not."""
    case = CASES.random(rng)[1]
    for dtype in FULL:
        for kwargs in ({}, {"is_causal": True}):
            args = positional(make_args(gen, case, dtype, "cpu"))

            def check(implementation, args=args, kwargs=kwargs) -> dict:
                call = LAYER.call(implementation, *args, **kwargs)
                LAYER.assert_inputs_unchanged(call, tuple(args), {})
                return call.outputs

            with SPEC.diagnosing(check, dict(case)):
                check(kata)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """float64 gradients held to float64's own tolerance, causal and not."""
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            args = make_args(gen, case, torch.float64, "cpu")
            check_gradients(kata, args, float64_throughout=True, is_causal=index % 2 == 1)

"""rotary_embedding: judged against RoPE as complex multiplication in float64, and its properties.

PyTorch has no rotary embedding, so the reference is judge.testing.rope.rope, an independent
formulation (each pair of coordinates read as a complex number and multiplied by
exp(i * position * theta)), computed in float64 from the very inputs the kata gets. Beside it,
two properties of a rotation hold whatever the layout: the inner product of a query rotated
at m and a key rotated at n depends only on m - n, and every vector keeps its norm.

Tolerances (measured over 100 seeds of this case table, every dtype, both layouts, on the
solution and three variants: float64 math, HF-style cos/sin cast to x's dtype, Meta-style
complex numbers in float32): float32 angles are accepted for every dtype, so an angle may be
off by about eps(float32) * position, and the result by that much times |x|. The allowed
error is atol = max|x| * (4 * eps(dtype) + 4 * eps(float32) * largest position), with
eps(float32) for a float64 x too; rtol = 0 (an element near 0 may belong to a long pair).
The worst measured: 0.14 of it in float32 and float64 (float32 math on a float64 x), 0.30 in
float16 and bfloat16 (cos/sin rounded to x's dtype and multiplied there); with positions
up to 20000 (200 random cases, against float64 values) at most 0.18 and 0.23. An angle
computed in a half dtype is off by whole radians past position 2048 (float16) or 256
(bfloat16): 20x to 190x this tolerance on the edge case made for it.
The float64 rule (a convention, FLOAT64_RULE) holds a float64 x to eps(float64) in both
terms: the solution and the four variants, which now all take a float64 x in float64,
measured at most 0.17 of it (100 seeds); float32 math on a float64 x is off by ~1e6 times it.
Norms: rtol 8 * eps(float32), measured at most 0.14 of it.
"""

import torch

from judge.forbidden import NONE
from judge.language import pick
from judge.testing.checks import call_repr, check_tensor_kind
from judge.testing.functions import FunctionKata, computation_eps, named
from judge.testing.inputs import randn
from judge.testing.rope import rope
from judge.testing.spec import FLOAT64_RULE, Case, CaseTable, KataSpec, dtypes, edge
from judge.testing.tiers import convention, core

EPS32 = torch.finfo(torch.float32).eps
FULL = (torch.float32, torch.float64)
HALF = (torch.float16, torch.bfloat16)
ROUNDING = 4  # units of eps(dtype) times max|x|: the rotation's own rounding
ANGLE = 4  # units of eps(float32) times max|x| per unit of position: float32 angles


def tolerance(
    dtype: torch.dtype, largest_position: int = 0, amplitude: float = 1.0, *, float64_throughout: bool = False
) -> dict:
    """float32 angles for every dtype: the allowed error grows with the largest position,
    and scales with the size of x's values (rtol is 0: an element near 0 may belong to a
    pair of any length). With float64_throughout a float64 x is held to float64's own
    accuracy, angles included (FLOAT64_RULE)."""
    angle = computation_eps(dtype) if float64_throughout else EPS32
    eps = angle if dtype == torch.float64 else torch.finfo(dtype).eps
    return {"rtol": 0.0, "atol": amplitude * (ROUNDING * eps + ANGLE * angle * max(largest_position, 0))}


# --------------------------------------------------------------------------- cases

# x: "contiguous"; "transposed q" (made [..., T, H, D], then heads and tokens swapped, as
# q.transpose(1, 2) gives); "last dim strided" (made [..., D, T] and transposed: the head
# dimension's stride is T). positions: "default" (omitted: arange(T)), "from N" (arange(N,
# N + T), decoding after N tokens), "every other from N" (a strided view: arange(N, N + 2T)
# [::2]), "scattered below N" (random, unsorted, repeats allowed).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("a transposed q decoding from 100, odd D/2", "转置过的 q，从位置 100 开始解码，D/2 为奇数",
         lead=[2, 3], T=7, D=10, x="transposed q", positions="from 100", base=10000.0),
    # Positions made in a half dtype round to even numbers past 2048 (float16), to multiples
    # of 16 past 2048 (bfloat16): their angles are then off by radians.
    edge("past half precision's exact integers", "超出半精度能精确表示的整数",
         lead=[2], T=6, D=8, x="contiguous", positions="every other from 2049", base=10000.0),
    edge("one pair (D = 2)", "一对坐标（D = 2）",
         lead=[5], T=9, D=2, x="contiguous", positions="default", base=10000.0),
    edge("one token (T = 1) at position 37", "位置 37 上的一个 token（T = 1）",
         lead=[4], T=1, D=12, x="contiguous", positions="from 37", base=10000.0),
    edge("base 500, no leading dims, scattered positions", "base 500，无前导维度，位置分散",
         lead=[], T=12, D=16, x="contiguous", positions="scattered below 600", base=500.0),
)
# fmt: on
# A head dimension with a stride is a layout convention, not the math: Meta's Llama code
# (view_as_complex on x.reshape(..., D/2, 2)) raises there, and is right everywhere else.
# fmt: off
STRIDED = (
    edge("one pair (D = 2), the head dim strided", "一对坐标（D = 2），头维度带步长",
         lead=[5], T=9, D=2, x="last dim strided", positions="default", base=10000.0),
    edge("no leading dims, the head dim strided, scattered positions", "无前导维度，头维度带步长，位置分散",
         lead=[], T=12, D=16, x="last dim strided", positions="scattered below 600", base=500.0),
)
# fmt: on


def hidden_cases(rng, count: int) -> list[dict]:
    """Leading dims (), (B,) or (B, H), then T and D, all different; positions of every kind below 1000."""
    cases = []
    for n_lead in rng.choices([0, 1, 2, 2], k=count):
        sizes = rng.sample(range(2, 21), n_lead + 1)
        lead, T = sizes[:n_lead], sizes[n_lead]
        D = 2 * rng.choice([d for d in range(2, 25) if 2 * d not in sizes])
        start = rng.randrange(1, 900)
        cases.append(
            {
                "lead": lead,
                "T": T,
                "D": D,
                "x": rng.choice(["contiguous"] + (["transposed q"] * 2 if lead else [])),
                "positions": rng.choice(
                    ["default", f"from {start}", f"every other from {start // 2}", "scattered below 1000"]
                ),
                "base": rng.choice([10000.0, 10000.0, 500.0, float(rng.randrange(100, 1_000_000))]),
            }
        )
    return cases


def make_x(gen, case, dtype, device="cpu") -> torch.Tensor:
    lead, T, D = case["lead"], case["T"], case["D"]
    if case["x"] == "transposed q" and lead:
        return randn(gen, *lead[:-1], T, lead[-1], D, dtype=dtype, device=device).transpose(-3, -2)
    if case["x"] != "contiguous":  # "last dim strided"
        return randn(gen, *lead, D, T, dtype=dtype, device=device).transpose(-1, -2)
    return randn(gen, *lead, T, D, dtype=dtype, device=device)


def make_positions(gen, case, device="cpu") -> torch.Tensor | None:
    kind, T = case["positions"], case["T"]
    number = int(kind.split()[-1]) if kind != "default" else 0
    if kind.startswith("from"):
        return torch.arange(number, number + T, device=device)
    if kind.startswith("every other"):
        return torch.arange(number, number + 2 * T, device=device)[::2]  # non-contiguous
    if kind.startswith("scattered"):
        return torch.randint(0, number, (T,), generator=gen).to(device)
    return None


def largest_position(positions, T: int) -> int:
    return T - 1 if positions is None else int(positions.max())


def sizes(x) -> dict:
    return {"T": x.size(-2), "D": x.size(-1)}


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: batch 8, 16 heads, 512 tokens, head size
    64, decoding from position 1000. PyTorch has no RoPE: the reference is the usual float32
    formulation of Hugging Face's Llama (an inv_freq, cos/sin of [T, D], rotate_half)."""
    gen = torch.Generator().manual_seed(0)
    x = randn(gen, 8, 16, 512, 64, device=device)
    positions = torch.arange(1000, 1512, device=device)

    def reference_call():
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 64, 2, device=device).float() / 64)
        freqs = positions.float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = x.chunk(2, dim=-1)
        return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()

    return (lambda: kata.apply_rotary_embedding(x, positions)), reference_call


SPEC = KataSpec(
    kata="rotary_embedding",
    symbol="apply_rotary_embedding",
    reference="RoPE as complex multiplication in float64 (judge/testing/rope.py), and its properties",
    forbidden=NONE,  # PyTorch has no rotary embedding to delegate to
    tolerances={dtype: tolerance(dtype) for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)},
    tolerance_note=(
        "atol times max|x|, plus 4 * eps(float32) * max|x| * the largest position: float32 angles "
        "are accepted for every dtype; solutions and variants measured at most 0.3 of it"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=3),
    benchmark=benchmark,
)


ROPE = FunctionKata(SPEC, outputs=named("result"), parameters={"apply_rotary_embedding": ("x", "positions")})


def check_against_reference(kata, x, positions=None, *, float64_throughout=False, **kwargs):
    """One call of the learner's function against the reference, inside its own diagnosis;
    called inside case.judged(), so that a failure names its case."""
    want = rope(x, positions, **kwargs).to(dtype=x.dtype, device=x.device)
    amplitude = float(x.double().abs().max())
    largest = largest_position(positions, x.size(-2))
    allowed = tolerance(x.dtype, largest, amplitude, float64_throughout=float64_throughout)
    args = (x,) if positions is None else (x, positions)
    with ROPE.judging(kata, *args, sizes=sizes(x), **kwargs) as call:
        SPEC.assert_close(call["result"], want, call=call.text, tolerance=allowed)


def rotated(implementation, *calls) -> list:
    """The learner's results for each call (args, kwargs), made where `implementation` lives
    (FunctionKata calls: one round trip each, on copies)."""
    return [ROPE.call(implementation, *args, **kwargs)["result"] for args, kwargs in calls]


# --------------------------------------------------------------------------- tests: the math


@core(zh="两种布局下都与复数参考实现一致")
@dtypes(*FULL)
def test_matches_the_complex_reference_in_both_layouts(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            x, positions = make_x(gen, case, dtype, device), make_positions(gen, case, device)
            for interleaved in (False, True):
                check_against_reference(kata, x, positions, base=case["base"], interleaved=interleaved)


@core(zh="默认值：位置从 0 开始、base 10000、rotate_half 布局")
def test_defaults_are_positions_from_0_base_10000_and_the_rotate_half_layout(kata, rng, gen):
    lead = rng.choice([[], [3], [2, 3]])
    case = Case("defaults", {"lead": lead, "T": rng.randrange(2, 40), "D": 2 * rng.randrange(2, 17)}, zh="默认值")
    with case.judged():
        check_against_reference(kata, randn(gen, *lead, case["T"], case["D"]))


@core(zh="内积只取决于偏移 m - n")
def test_inner_products_depend_only_on_the_offset_m_minus_n(kata, rng, gen):
    """<rope(q, m), rope(k, n)> = <rope(q, m - n), k>: a query and a key with the same offset
    meet the same way wherever they sit; the dot products are checked against the reference's."""
    D = 2 * rng.randrange(2, 17)
    q, k = randn(gen, D, dtype=torch.float64), randn(gen, D, dtype=torch.float64)
    offset = rng.choice([-1, 1]) * rng.randrange(1, 60)
    m = torch.randint(max(offset, 0), 3000, (12,), generator=gen)
    n = m - offset
    for interleaved in (False, True):
        kwargs = {"base": rng.choice([10000.0, 500.0]), "interleaved": interleaved}
        case = Case("inner products", {"T": len(m), "D": D, "offset": offset} | kwargs, zh="内积")
        want = (rope(q[None], torch.tensor([offset]), **kwargs)[0] @ k).expand(len(m)).contiguous()
        queries, keys = q.repeat(len(m), 1), k.repeat(len(m), 1)
        call = pick(
            f"apply_rotary_embedding(q, m, ...) . apply_rotary_embedding(k, m - {offset}, ...) "
            f"for 12 positions m, q and k float64[{D}]",
            f"apply_rotary_embedding(q, m, ...) . apply_rotary_embedding(k, m - {offset}, ...)"
            f"，共 12 个位置 m，q 和 k 为 float64[{D}]",
        )

        def inner_products(implementation, kwargs=kwargs, queries=queries, keys=keys) -> dict:
            rq, rk = rotated(implementation, ((queries, m), kwargs), ((keys, n), kwargs))
            for what, got in (("rotated q", rq), ("rotated k", rk)):
                check_tensor_kind(got, queries, call=call, what=what)
            return {"inner products": (rq * rk).sum(-1)}

        # float32 angles: each pair's angle is off by up to about eps(float32) * m, but the
        # errors of the pairs partly cancel; the solution and variants measured at most 0.05 of this
        allowed = {"rtol": 0.0, "atol": float(q.norm() * k.norm()) * EPS32 * (ROUNDING + 2 * int(m.max()))}
        with case.judged(), SPEC.diagnosing(inner_products, {"D": D}):
            got = inner_products(kata)["inner products"]
            SPEC.assert_close(got, want, call=call, what="inner products", tolerance=allowed)


@core(zh="每个向量的范数保持不变")
@dtypes(*FULL)
def test_every_vector_keeps_its_norm(kata, rng, gen, dtype):
    """A rotation changes directions, never lengths: |rope(x)| = |x| for each head vector."""
    case = SPEC.cases.random(rng)[0] | {"positions": "scattered below 5000"}
    x, positions = make_x(gen, case, dtype), make_positions(gen, case)
    kwargs = {"base": case["base"], "interleaved": rng.choice([False, True])}
    call = f"{call_repr('apply_rotary_embedding', x, positions, **kwargs)}.norm(dim=-1)"

    def norms(implementation) -> dict:
        [result] = rotated(implementation, ((x, positions), kwargs))
        check_tensor_kind(result, x, call=call.removesuffix(".norm(dim=-1)"), what="result")
        return {"norms": result.double().norm(dim=-1)}

    with case.judged(), SPEC.diagnosing(norms, sizes(x)):
        got = norms(kata)["norms"]
        want = x.double().norm(dim=-1)
        SPEC.assert_close(got, want, call=call, what="norms", tolerance={"rtol": 8 * EPS32, "atol": 0.0})


# --------------------------------------------------------------------------- tests: the conventions


@convention(
    "float16 and bfloat16 inputs take their angles in float32 (or float64) and come back in their own dtype.",
    zh="半精度输入的角度用 float32 计算",
)
@dtypes(*HALF)
def test_half_precision_takes_its_angles_in_float32(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            x, positions = make_x(gen, case, dtype, device), make_positions(gen, case, device)
            for interleaved in (False, True):
                check_against_reference(kata, x, positions, base=case["base"], interleaved=interleaved)


@convention(
    "x may be any view, its last dimension strided too (as x.transpose(-1, -2) of a [..., D, T] tensor is).",
    zh="x 的最后一维可以带步长",
)
def test_x_may_have_a_strided_last_dimension(kata, rng, gen):
    """The math's own tolerance, both layouts, on the STRIDED edge cases and a random draw."""
    drawn = SPEC.cases.random(rng, 1)[0] | {"x": "last dim strided"}
    for case in (*STRIDED, drawn):
        with case.judged():
            x, positions = make_x(gen, case, torch.float32), make_positions(gen, case)
            for interleaved in (False, True):
                check_against_reference(kata, x, positions, base=case["base"], interleaved=interleaved)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """float64's own accuracy, angles included: the edge case past half precision's exact
    integers makes a float32 angle show."""
    for case in SPEC.cases.cases(rng, 2):
        with case.judged():
            x, positions = make_x(gen, case, torch.float64), make_positions(gen, case)
            for interleaved in (False, True):
                check_against_reference(
                    kata, x, positions, base=case["base"], interleaved=interleaved, float64_throughout=True
                )


@convention("an odd D raises ValueError.", zh="头大小为奇数时抛出 ValueError")
def test_odd_head_size_raises_value_error(kata, rng, gen):
    D = 2 * rng.randrange(0, 8) + 1
    reason = pick(f"odd D = {D}: coordinates come in pairs", f"D = {D} 是奇数：坐标成对出现")
    ROPE.assert_raises(kata, ValueError, randn(gen, 2, 3, D), reason=reason)


@convention(
    "results follow x's device (the frequencies and default positions made inside too).", zh="结果跟随 x 所在的 device"
)
def test_result_follows_the_device_of_x(kata, other_device):
    """Frequencies and default positions made inside the kata must be made on x's device."""
    case = SPEC.cases.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for default_positions in (True, False):
        for interleaved in (False, True):
            with case.judged():
                on_device(kata, other_device, case, default_positions, interleaved)


def on_device(kata, device: str, case, default_positions: bool, interleaved: bool) -> None:
    """ROPE.on_device on x made from a fixed generator, with positions left out or from 50."""

    def make(where):
        x = make_x(torch.Generator().manual_seed(0), case, torch.float32, where)
        args = (x,) if default_positions else (x, torch.arange(50, 50 + case["T"], device=where))
        return args, {"base": case["base"], "interleaved": interleaved}

    def expected(where) -> dict:
        args, kwargs = make(where)
        return {"result": rope(*args, **kwargs).to(dtype=torch.float32, device=where)}

    def compare(got, want, *, call, what):
        (x, *positions), _ = make("cpu")
        largest = largest_position(positions[0] if positions else None, case["T"])
        allowed = tolerance(torch.float32, largest, float(x.abs().max()))
        SPEC.assert_close(got, want, call=call, what=what, tolerance=allowed)

    ROPE.on_device(kata, device, make=make, expected=expected, compare=compare, sizes=sizes(make("cpu")[0][0]))


@convention("x and positions are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """In every dtype and both layouts, with strided positions: a kata may convert in place."""
    case = SPEC.cases.random(rng)[2] | {"positions": "every other from 3"}
    positions = make_positions(gen, case)  # a strided view
    for dtype in (*FULL, *HALF):
        x = make_x(gen, case, dtype)
        for interleaved in (False, True):
            with case.judged():
                ROPE.judging_inputs(kata, x, positions, interleaved=interleaved, sizes=sizes(x))

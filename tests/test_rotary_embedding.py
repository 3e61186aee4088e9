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
Norms: rtol 8 * eps(float32), measured at most 0.14 of it.
"""

import torch

from judge.forbidden import NONE, ForbiddenCallError
from judge.testing.checks import (
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.rope import rope
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

EPS32 = torch.finfo(torch.float32).eps
FULL = (torch.float32, torch.float64)
HALF = (torch.float16, torch.bfloat16)
ROUNDING = 4  # units of eps(dtype) times max|x|: the rotation's own rounding
ANGLE = 4  # units of eps(float32) times max|x| per unit of position: float32 angles


def tolerance(dtype: torch.dtype, largest_position: int = 0, amplitude: float = 1.0) -> dict:
    """float32 angles for every dtype: the allowed error grows with the largest position,
    and scales with the size of x's values (rtol is 0: an element near 0 may belong to a
    pair of any length)."""
    eps = EPS32 if dtype == torch.float64 else torch.finfo(dtype).eps
    return {"rtol": 0.0, "atol": amplitude * (ROUNDING * eps + ANGLE * EPS32 * max(largest_position, 0))}


# --------------------------------------------------------------------------- cases

# x: "contiguous"; "transposed q" (made [..., T, H, D], then heads and tokens swapped, as
# q.transpose(1, 2) gives); "last dim strided" (made [..., D, T] and transposed: the head
# dimension's stride is T). positions: "default" (omitted: arange(T)), "from N" (arange(N,
# N + T), decoding after N tokens), "every other from N" (a strided view: arange(N, N + 2T)
# [::2]), "scattered below N" (random, unsorted, repeats allowed).
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge(
        "a transposed q decoding from 100, odd D/2",
        lead=[2, 3],
        T=7,
        D=10,
        x="transposed q",
        positions="from 100",
        base=10000.0,
    ),
    # Positions made in a half dtype round to even numbers past 2048 (float16), to multiples
    # of 16 past 2048 (bfloat16): their angles are then off by radians.
    edge(
        "past half precision's exact integers",
        lead=[2],
        T=6,
        D=8,
        x="contiguous",
        positions="every other from 2049",
        base=10000.0,
    ),
    edge(
        "one pair (D = 2), the head dim strided",
        lead=[5],
        T=9,
        D=2,
        x="last dim strided",
        positions="default",
        base=10000.0,
    ),
    edge("one token (T = 1) at position 37", lead=[4], T=1, D=12, x="contiguous", positions="from 37", base=10000.0),
    edge(
        "base 500, no leading dims, scattered positions",
        lead=[],
        T=12,
        D=16,
        x="last dim strided",
        positions="scattered below 600",
        base=500.0,
    ),
)


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
                "x": rng.choice(["contiguous", "last dim strided"] + (["transposed q"] * 2 if lead else [])),
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


# --------------------------------------------------------------------------- calls


def copy(tensor):
    """A copy with the same strides (a transposed x stays transposed, a strided view strided)."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    return torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def call_kata(kata, x, positions=None, **kwargs):
    """(call, result): positions omitted when None, every input checked unchanged afterwards."""
    args = (x,) if positions is None else (x, positions)
    call = call_repr("apply_rotary_embedding", *args, **kwargs)
    result = call_and_check_inputs(lambda: kata.apply_rotary_embedding(*args, **kwargs), call, x=x, positions=positions)
    return call, result


def replay(x, positions=None, what="result", **kwargs):
    """The same call with another implementation, on copies of the inputs taken now (for the diagnosis)."""
    x, positions = copy(x), copy(positions)

    def run(implementation) -> dict:
        return {what: call_kata(implementation, copy(x), copy(positions), **kwargs)[1]}

    return run


def sizes(x) -> dict:
    return {"T": x.size(-2), "D": x.size(-1)}


def check_against_reference(kata, x, positions=None, **kwargs):
    want = rope(x, positions, **kwargs).to(dtype=x.dtype, device=x.device)  # first: the kata may break its inputs
    allowed = tolerance(x.dtype, largest_position(positions, x.size(-2)), float(x.double().abs().max()))
    with SPEC.diagnosing(replay(x, positions, **kwargs), sizes(x)):
        call, got = call_kata(kata, x, positions, **kwargs)
        SPEC.assert_close(got, want, call=call, tolerance=allowed)


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


# --------------------------------------------------------------------------- tests


@dtypes(*FULL)
def test_matches_the_complex_reference_in_both_layouts(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            x, positions = make_x(gen, case, dtype, device), make_positions(gen, case, device)
            for interleaved in (False, True):
                check_against_reference(kata, x, positions, base=case["base"], interleaved=interleaved)


@dtypes(*HALF)
def test_half_precision_takes_its_angles_in_float32(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            x, positions = make_x(gen, case, dtype, device), make_positions(gen, case, device)
            for interleaved in (False, True):
                check_against_reference(kata, x, positions, base=case["base"], interleaved=interleaved)


def test_defaults_are_positions_from_0_base_10000_and_the_rotate_half_layout(kata, rng, gen):
    lead = rng.choice([[], [3], [2, 3]])
    x = randn(gen, *lead, rng.randrange(2, 40), 2 * rng.randrange(2, 17))
    check_against_reference(kata, x)


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
        want = (rope(q[None], torch.tensor([offset]), **kwargs)[0] @ k).expand(len(m)).contiguous()
        call = (
            f"apply_rotary_embedding(q, m, ...) . apply_rotary_embedding(k, m - {offset}, ...) "
            f"for 12 positions m, q and k float64[{D}]"
        )

        def inner_products(implementation, kwargs=kwargs):
            rq = call_kata(implementation, q.repeat(len(m), 1), m.clone(), **kwargs)[1]
            rk = call_kata(implementation, k.repeat(len(m), 1), n.clone(), **kwargs)[1]
            return {"inner products": (rq * rk).sum(-1)}

        # float32 angles: each pair's angle is off by up to about eps(float32) * m, but the
        # errors of the pairs partly cancel; the solution and variants measured at most 0.05 of this
        allowed = {"rtol": 0.0, "atol": float(q.norm() * k.norm()) * EPS32 * (ROUNDING + 2 * int(m.max()))}
        with SPEC.diagnosing(inner_products, {"D": D}):
            got = inner_products(kata)["inner products"]
            SPEC.assert_close(got, want, call=call, what="inner products", tolerance=allowed)


@dtypes(*FULL)
def test_every_vector_keeps_its_norm(kata, rng, gen, dtype):
    """A rotation changes directions, never lengths: |rope(x)| = |x| for each head vector."""
    case = SPEC.cases.random(rng)[0] | {"positions": "scattered below 5000"}
    x, positions = make_x(gen, case, dtype), make_positions(gen, case)
    kwargs = {"base": case["base"], "interleaved": rng.choice([False, True])}

    def norms(implementation) -> dict:
        _, result = call_kata(implementation, copy(x), positions.clone(), **kwargs)
        return {"norms": result.double().norm(dim=-1) if isinstance(result, torch.Tensor) else result}

    call = f"{call_repr('apply_rotary_embedding', x, positions, **kwargs)}.norm(dim=-1)"
    with SPEC.diagnosing(norms, sizes(x)):
        got = norms(kata)["norms"]
        want = x.double().norm(dim=-1)
        SPEC.assert_close(got, want, call=call, what="norms", tolerance={"rtol": 8 * EPS32, "atol": 0.0})


def test_odd_head_size_raises_value_error(kata, rng, gen):
    D = 2 * rng.randrange(0, 8) + 1
    x = randn(gen, 2, 3, D)
    call = call_repr("apply_rotary_embedding", x)

    def check(implementation) -> dict:
        try:
            result = implementation.apply_rotary_embedding(x.clone())
        except ValueError:
            return {}
        except (NotImplementedError, ForbiddenCallError):  # the stub, a refusal: as they are
            raise
        except Exception as error:  # noqa: BLE001 - the message names what was raised instead
            raise AssertionError(
                f"{call} raised {type(error).__name__}: {error}; expected ValueError (odd D = {D})"
            ) from None
        raise AssertionError(f"{call} returned {describe(result)}; expected ValueError (odd D = {D}: no pairs)")

    with SPEC.diagnosing(check, {"D": D}):
        check(kata)


def test_result_follows_the_device_of_x(kata, rng, gen, other_device):
    """Frequencies and default positions made inside the kata must be made on x's device."""
    case = SPEC.cases.random(rng)[1]
    x = make_x(gen, case, torch.float32, other_device)
    for positions in (None, torch.arange(50, 50 + case["T"], device=other_device)):
        kwargs = {"base": case["base"], "interleaved": rng.choice([False, True])}
        if other_device != "meta":
            check_against_reference(kata, x, positions, **kwargs)
            continue
        want = torch.empty(x.shape, dtype=x.dtype, device="meta")  # meta: a shape and a device, no values
        with SPEC.diagnosing(replay(x, positions, **kwargs), sizes(x)):
            call, got = call_on_device(lambda p=positions, kw=kwargs: call_kata(kata, x, p, **kw), other_device)
            check_tensor_kind(got, want, call=call, what="result")


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call is checked (see call_kata); here in float16, where a kata may convert in place."""
    case = SPEC.cases.random(rng)[2]
    x, positions = make_x(gen, case, torch.float16), torch.arange(3, 3 + 2 * case["T"])[::2]
    with SPEC.diagnosing(replay(x, positions, interleaved=True), sizes(x)):
        call_kata(kata, x, positions, interleaved=True)

"""sinusoidal_positional_encoding: judged against the paper's formula computed in float64."""

import torch

from judge.testing.checks import call_repr, check_tensor_kind, describe
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

EPS32 = torch.finfo(torch.float32).eps


def reference(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The formula itself, column by column, in float64."""
    position = torch.arange(num_positions, dtype=torch.float64)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        frequency = base ** (-2 * i / d_model)
        pe[:, 2 * i] = torch.sin(position * frequency)
        pe[:, 2 * i + 1] = torch.cos(position * frequency)
    return pe


def tolerance(dtype: torch.dtype, num_positions: int) -> dict:
    """float32 accuracy for every dtype (the usual way, float32 then cast, is correct even for a
    float64 table): angle error, which grows with the position, plus rounding of the result."""
    return {"rtol": 0.0, "atol": 8 * EPS32 * max(num_positions, 1) + torch.finfo(dtype).eps}


def hidden_sizes(rng, count: int, max_positions: int = 200) -> list[dict]:
    """(num_positions, d_model) pairs, never equal."""
    sizes = []
    while len(sizes) < count:
        p, d = rng.randrange(2, max_positions), 2 * rng.randrange(2, 40)
        if p != d:
            sizes.append({"P": p, "D": d})
    return sizes


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size, for the grader's timing.

    The reference is the usual vectorised float32 formulation (PyTorch has no built-in)."""
    p, d = 2048, 512

    def reference_call():
        position = torch.arange(p, dtype=torch.float32, device=device)[:, None]
        frequency = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
        pe = torch.empty(p, d, device=device)
        pe[:, 0::2] = torch.sin(position * frequency)
        pe[:, 1::2] = torch.cos(position * frequency)
        return pe

    return (lambda: kata.sinusoidal_positional_encoding(p, d, device=device)), reference_call


SPEC = KataSpec(
    kata="positional_encoding",
    symbol="sinusoidal_positional_encoding",
    reference="the paper's formula in float64",
    tolerances={dtype: tolerance(dtype, 0) for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)},
    tolerance_note="atol plus 8 * eps(float32) * num_positions: float32 angles are accepted for every dtype",
    cases=CaseTable(
        draw=hidden_sizes,
        edges=(
            edge("one pair of columns, odd length", P=37, D=2),
            # Positions made in a half dtype round to even numbers above 256 (bfloat16) and
            # 2048 (float16): their angles are then wrong by up to a whole radian.
            edge("past bfloat16's exact integers", P=300, D=6),
            edge("past float16's exact integers", P=2100, D=8),
            edge("one position", P=1, D=10),
        ),
        draws=3,
    ),
    benchmark=benchmark,
)


@dtypes(torch.float32, torch.float64)
def test_matches_the_formula(kata, rng, dtype):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            p, d = case["P"], case["D"]
            base = rng.choice([10000.0, 10000.0, 100.0, round(rng.uniform(20, 5000), 3)])
            call = call_repr("sinusoidal_positional_encoding", p, d, base, dtype=dtype)

            def replay(implementation, p=p, d=d, base=base):
                return {"table": implementation.sinusoidal_positional_encoding(p, d, base, dtype=dtype)}

            with SPEC.diagnosing(replay, case):
                got = kata.sinusoidal_positional_encoding(p, d, base, dtype=dtype)
                want = reference(p, d, base).to(dtype)
                SPEC.assert_close(got, want, call=call, what="table", tolerance=tolerance(dtype, p))


def test_defaults_are_base_10000_and_float32(kata, rng):
    p, d = rng.randrange(20, 100), 2 * rng.randrange(3, 20)
    call = call_repr("sinusoidal_positional_encoding", p, d)
    with SPEC.diagnosing(lambda implementation: {"table": implementation.sinusoidal_positional_encoding(p, d)}):
        got = kata.sinusoidal_positional_encoding(p, d)
        want = reference(p, d).to(torch.float32)
        SPEC.assert_close(got, want, call=call, what="table", tolerance=tolerance(torch.float32, p))


@dtypes(torch.float16, torch.bfloat16)
def test_half_precision_is_computed_precisely_then_cast(kata, rng, dtype):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            p, d = case["P"], case["D"]
            call = call_repr("sinusoidal_positional_encoding", p, d, dtype=dtype)

            def replay(implementation, p=p, d=d):
                return {"table": implementation.sinusoidal_positional_encoding(p, d, dtype=dtype)}

            with SPEC.diagnosing(replay, case):
                got = kata.sinusoidal_positional_encoding(p, d, dtype=dtype)
                SPEC.assert_close(
                    got, reference(p, d).to(dtype), call=call, what="table", tolerance=tolerance(dtype, p)
                )


def test_odd_d_model_raises_value_error(kata, rng):
    d = 2 * rng.randrange(1, 20) + 1

    def check(implementation) -> dict:
        try:
            result = implementation.sinusoidal_positional_encoding(4, d)
        except ValueError:
            return {}
        raise AssertionError(
            f"sinusoidal_positional_encoding(4, {d}) should raise ValueError (odd d_model), but returned {describe(result)}"
        )

    with SPEC.diagnosing(check):
        check(kata)


def test_table_is_built_on_the_requested_device(kata, rng, other_device):
    p, d = rng.randrange(2, 30), 2 * rng.randrange(2, 10)
    call = call_repr("sinusoidal_positional_encoding", p, d, device=other_device)
    with SPEC.diagnosing(
        lambda implementation: {"table": implementation.sinusoidal_positional_encoding(p, d, device=other_device)}
    ):
        got = kata.sinusoidal_positional_encoding(p, d, device=other_device)
        want = reference(p, d).to(torch.float32).to(other_device)
        if other_device == "meta":  # meta tensors have a shape and a device but no values
            check_tensor_kind(got, want, call=call, what="table")
        else:
            SPEC.assert_close(got, want, call=call, what="table", tolerance=tolerance(torch.float32, p))

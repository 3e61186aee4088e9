"""sinusoidal_positional_encoding: judged against the paper's formula computed in float64."""

import torch

from judge.testing.checks import assert_close, assert_prints_nothing, call_repr, check_tensor_kind, describe
from judge.testing.spec import KataSpec, dtypes


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
    angle_error = 8 * torch.finfo(torch.float32).eps * max(num_positions, 1)
    return {"rtol": 0.0, "atol": angle_error + torch.finfo(dtype).eps}


def hidden_sizes(rng, max_positions: int = 200) -> list[tuple[int, int]]:
    """(num_positions, d_model) pairs, never equal, including 1 position and d_model 2."""
    sizes = [(1, 2 * rng.randrange(2, 9)), (rng.randrange(3, 40, 2), 2)]
    while len(sizes) < 5:
        p, d = rng.randrange(2, max_positions), 2 * rng.randrange(2, 40)
        if p != d:
            sizes.append((p, d))
    return sizes


@dtypes(torch.float32, torch.float64)
def test_matches_the_formula(kata, rng, dtype):
    for (p, d), base in zip(hidden_sizes(rng), [10000.0, 10000.0, 100.0, rng.uniform(20, 5000), 10000.0]):
        call = call_repr("sinusoidal_positional_encoding", p, d, base, dtype=dtype)
        got = kata.sinusoidal_positional_encoding(p, d, base, dtype=dtype)
        assert_close(got, reference(p, d, base).to(dtype), call=call, what="table", tolerance=tolerance(dtype, p))


def test_defaults_are_base_10000_and_float32(kata, rng):
    p, d = rng.randrange(20, 100), 2 * rng.randrange(3, 20)
    got = kata.sinusoidal_positional_encoding(p, d)
    want = reference(p, d).to(torch.float32)
    assert_close(
        got,
        want,
        call=call_repr("sinusoidal_positional_encoding", p, d),
        what="table",
        tolerance=tolerance(torch.float32, p),
    )


@dtypes(torch.float16, torch.bfloat16)
def test_half_precision_is_computed_precisely_then_cast(kata, rng, dtype):
    for p, d in hidden_sizes(rng, max_positions=400):
        call = call_repr("sinusoidal_positional_encoding", p, d, dtype=dtype)
        got = kata.sinusoidal_positional_encoding(p, d, dtype=dtype)
        assert_close(got, reference(p, d).to(dtype), call=call, what="table", tolerance=tolerance(dtype, p))


def test_odd_d_model_raises_value_error(kata, rng):
    d = 2 * rng.randrange(1, 20) + 1
    try:
        result = kata.sinusoidal_positional_encoding(4, d)
    except ValueError:
        return
    raise AssertionError(
        f"sinusoidal_positional_encoding(4, {d}) should raise ValueError (odd d_model), but returned {describe(result)}"
    )


def test_table_is_built_on_the_requested_device(kata, rng, other_device):
    p, d = rng.randrange(2, 30), 2 * rng.randrange(2, 10)
    call = call_repr("sinusoidal_positional_encoding", p, d, device=other_device)
    got = kata.sinusoidal_positional_encoding(p, d, device=other_device)
    want = reference(p, d).to(torch.float32).to(other_device)
    if other_device == "meta":  # meta tensors have a shape and a device but no values
        check_tensor_kind(got, want, call=call, what="table")
    else:
        assert_close(got, want, call=call, what="table", tolerance=tolerance(torch.float32, p))


def test_prints_nothing(kata, capfd):
    kata.sinusoidal_positional_encoding(3, 4)
    assert_prints_nothing(capfd, "sinusoidal_positional_encoding(3, 4)")


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size, for the grader's timing.

    The reference is the usual vectorised float32 formulation (PyTorch has no built-in).
    """
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
    benchmark=benchmark,
)

"""padding_mask: judged against arange(max_len) >= lengths[:, None] (True = padding)."""

import pytest
import torch

from judge.testing.checks import (
    assert_equal_mask,
    assert_not_modified,
    call_on_device,
    call_repr,
    check_tensor_kind,
)
from judge.testing.spec import CaseTable, KataSpec, edge


def reference(lengths: list[int], max_len: int, device="cpu") -> torch.Tensor:
    return torch.arange(max_len, device=device)[None, :] >= torch.tensor(lengths, device=device)[:, None]


def hidden_lengths(rng, count: int) -> list[dict]:
    """B lengths, B itself random; a row may be empty; at least one row is not."""
    cases = []
    for _ in range(count):
        lengths = [rng.randrange(0, 24) for _ in range(rng.choice([1, 2, 3, 5, 7]))]
        lengths[rng.randrange(len(lengths))] = rng.randrange(1, 24)
        cases.append({"lengths": lengths})
    return cases


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size, for the grader's timing."""
    lengths = torch.randint(1, 512, (64,), generator=torch.Generator().manual_seed(0)).to(device)

    def reference_call():
        return torch.arange(512, device=device)[None, :] >= lengths[:, None]

    return (lambda: kata.padding_mask(lengths, 512)), reference_call


SPEC = KataSpec(
    kata="padding_mask",
    tolerances={},  # masks are compared exactly
    symbol="padding_mask",
    reference="arange(max_len)[None, :] >= lengths[:, None], exactly",
    cases=CaseTable(
        draw=hidden_lengths,
        edges=(
            edge("one sequence", lengths=[5]),
            edge("an empty sequence", lengths=[3, 0, 6]),
            edge("every sequence full length", lengths=[4, 4, 4, 4]),
            edge("length one", lengths=[1, 2]),
        ),
        draws=4,
    ),
    benchmark=benchmark,
)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_default_max_len_is_the_longest_length(kata, rng, index_dtype):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            lengths = case["lengths"]
            tensor = torch.tensor(lengths, dtype=index_dtype)
            with SPEC.diagnosing(lambda implementation, t=tensor: {"mask": implementation.padding_mask(t.clone())}):
                assert_equal_mask(
                    kata.padding_mask(tensor),
                    reference(lengths, max(lengths)),
                    call=call_repr("padding_mask", tensor) + f" with lengths={lengths}",
                )


def test_explicit_max_len_adds_padding_columns(kata, rng):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            lengths = case["lengths"]
            max_len = max(lengths) + rng.randrange(1, 6)
            tensor = torch.tensor(lengths)

            def replay(implementation, tensor=tensor, max_len=max_len):
                return {"mask": implementation.padding_mask(tensor.clone(), max_len=max_len)}

            with SPEC.diagnosing(replay):
                assert_equal_mask(
                    kata.padding_mask(tensor, max_len=max_len),
                    reference(lengths, max_len),
                    call=call_repr("padding_mask", tensor, max_len=max_len) + f" with lengths={lengths}",
                )


def test_accepts_a_list_of_ints(kata, rng):
    lengths = SPEC.cases.random(rng, 1)[0]["lengths"]
    max_len = max(lengths) + 2

    def check(implementation) -> dict:
        got = implementation.padding_mask(list(lengths))
        assert_equal_mask(got, reference(lengths, max(lengths)), call=call_repr("padding_mask", lengths))
        longer = implementation.padding_mask(list(lengths), max_len)
        assert_equal_mask(longer, reference(lengths, max_len), call=call_repr("padding_mask", lengths, max_len))
        return {}

    with SPEC.diagnosing(check):
        check(kata)


def test_result_lives_on_the_device_of_lengths(kata, rng, other_device):
    lengths = SPEC.cases.random(rng, 1)[0]["lengths"]
    max_len = max(lengths) + 1
    tensor = torch.tensor(lengths, device=other_device)
    call = call_repr("padding_mask", tensor, max_len=max_len)
    with SPEC.diagnosing(lambda implementation: {"mask": implementation.padding_mask(tensor.clone(), max_len=max_len)}):
        got = call_on_device(lambda: kata.padding_mask(tensor, max_len=max_len), other_device)
        if tensor.device.type == "meta":  # meta tensors have a shape and a device but no values
            check_tensor_kind(got, reference(lengths, max_len, "meta"), call=call, what="mask")
        else:
            assert_equal_mask(got, reference(lengths, max_len, other_device), call=call)


def test_does_not_modify_lengths(kata, rng):
    lengths = torch.tensor(SPEC.cases.random(rng, 1)[0]["lengths"]) + 1
    snapshot = lengths.clone()
    kata.padding_mask(lengths)
    assert_not_modified("lengths", lengths, snapshot, call=call_repr("padding_mask", lengths))

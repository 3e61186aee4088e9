"""causal_mask: judged against nn.Transformer.generate_square_subsequent_mask."""

import pytest
import torch
from torch import nn

from judge.forbidden import CAUSAL_MASK
from judge.testing.checks import assert_equal_mask, call_repr, check_tensor_kind
from judge.testing.spec import CaseTable, KataSpec, edge


def reference(seq_len: int, device="cpu") -> torch.Tensor:
    return nn.Transformer.generate_square_subsequent_mask(seq_len, device=torch.device(device)) == float("-inf")


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size, for the grader's timing."""
    n = 1024
    return (lambda: kata.causal_mask(n, device=device)), (lambda: reference(n, device))


SPEC = KataSpec(
    kata="causal_mask",
    tolerances={},  # masks are compared exactly
    symbol="causal_mask",
    reference="nn.Transformer.generate_square_subsequent_mask(n) == -inf, exactly",
    forbidden=CAUSAL_MASK,
    cases=CaseTable(
        draw=lambda rng, count: [{"n": n} for n in rng.sample(range(3, 40), count)],
        edges=(edge("odd length", n=7), edge("two positions", n=2), edge("one position", n=1)),
        draws=3,
    ),
    benchmark=benchmark,
)


def test_matches_generate_square_subsequent_mask(kata, rng):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            n = case["n"]
            with SPEC.diagnosing(lambda implementation, n=n: {"mask": implementation.causal_mask(n)}, case):
                assert_equal_mask(kata.causal_mask(n), reference(n), call=call_repr("causal_mask", n))


@pytest.mark.parametrize("device_type", ["cpu", "other"])
def test_mask_is_built_on_the_requested_device(kata, rng, device_type, other_device):
    device = torch.device("cpu" if device_type == "cpu" else other_device)
    n = rng.randrange(2, 20)
    call = call_repr("causal_mask", n, device=device)
    with SPEC.diagnosing(lambda implementation: {"mask": implementation.causal_mask(n, device=device)}, {"n": n}):
        got = kata.causal_mask(n, device=device)
        if device.type == "meta":  # meta tensors have a shape and a device but no values
            check_tensor_kind(got, reference(n, device), call=call, what="mask")
        else:
            assert_equal_mask(got, reference(n, device), call=call)

"""causal_mask: judged against nn.Transformer.generate_square_subsequent_mask."""

import torch
from torch import nn

from judge.forbidden import CAUSAL_MASK
from judge.testing.checks import assert_equal_mask
from judge.testing.functions import FunctionKata, named
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core


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
        edges=(
            edge("odd length", "奇数长度", n=7),
            edge("two positions", "两个位置", n=2),
            edge("one position", "一个位置", n=1),
        ),
        draws=3,
    ),
    benchmark=benchmark,
)
MASK = FunctionKata(SPEC, outputs=named("mask"))


@core(zh="与 nn.Transformer.generate_square_subsequent_mask 一致")
def test_matches_generate_square_subsequent_mask(kata, rng):
    for case in SPEC.cases.cases(rng):
        with case.judged(), MASK.judging(kata, case["n"], sizes=case) as call:
            assert_equal_mask(call["mask"], reference(case["n"]), call=call.text)


@convention("device: device of the result (None means the default device).", zh="掩码建在指定的 device 上")
def test_mask_is_built_on_the_requested_device(kata, other_device):
    n = SPEC.cases.edges[0]["n"]  # fixed: a verdict on the meta stand-in must not depend on the seed
    MASK.on_device(
        kata,
        other_device,
        make=lambda device: ((n,), {"device": device}),
        expected=lambda device: {"mask": reference(n, device)},
        compare=assert_equal_mask,
    )

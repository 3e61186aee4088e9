"""padding_mask: judged against arange(max_len) >= lengths[:, None] (True = padding)."""

import pytest
import torch

from judge.language import pick
from judge.testing.checks import assert_equal_mask
from judge.testing.functions import FunctionKata, named
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core


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
            edge("one sequence", "只有一个序列", lengths=[5]),
            edge("an empty sequence", "含一个空序列", lengths=[3, 0, 6]),
            edge("every sequence full length", "每个序列都是满长", lengths=[4, 4, 4, 4]),
            edge("length one", "长度为 1", lengths=[1, 2]),
        ),
        draws=4,
    ),
    benchmark=benchmark,
)



MASK = FunctionKata(SPEC, outputs=named("mask"), parameters={"padding_mask": ("lengths", "max_len")})


@core(zh="max_len 缺省时取最长的长度")
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_default_max_len_is_the_longest_length(kata, rng, index_dtype):
    for case in SPEC.cases.cases(rng):
        lengths = case["lengths"]
        with case.judged(), MASK.judging(kata, torch.tensor(lengths, dtype=index_dtype), sizes=case) as call:
            want = reference(lengths, max(lengths))
            text = pick(f"{call.text} with lengths={lengths}", f"{call.text}（lengths={lengths}）")
            assert_equal_mask(call["mask"], want, call=text)


@core(zh="显式给出的 max_len 会补出填充列")
def test_explicit_max_len_adds_padding_columns(kata, rng):
    for case in SPEC.cases.cases(rng):
        lengths = case["lengths"]
        max_len = max(lengths) + rng.randrange(1, 6)
        with case.judged(), MASK.judging(kata, torch.tensor(lengths), max_len=max_len, sizes=case) as call:
            text = pick(f"{call.text} with lengths={lengths}", f"{call.text}（lengths={lengths}）")
            assert_equal_mask(call["mask"], reference(lengths, max_len), call=text)


@convention("lengths may also be a list of ints (the result is then on the CPU).", zh="接受 int 列表")
def test_accepts_a_list_of_ints(kata, rng):
    case = SPEC.cases.random(rng, 1)[0]
    lengths = case["lengths"]
    for max_len in (None, max(lengths) + 2):  # left out, then passed positionally
        args = (list(lengths),) if max_len is None else (list(lengths), max_len)
        with case.judged(), MASK.judging(kata, *args, sizes=case) as call:
            assert_equal_mask(call["mask"], reference(lengths, max_len or max(lengths)), call=call.text)


@convention("the result is on the device of `lengths`.", zh="结果位于 lengths 所在的设备上")
def test_result_lives_on_the_device_of_lengths(kata, other_device):
    case = SPEC.cases.edges[1]  # fixed: a verdict on the meta stand-in must not depend on the seed
    lengths, max_len = case["lengths"], max(case["lengths"]) + 1
    with case.judged():
        MASK.on_device(
            kata,
            other_device,
            make=lambda device: ((torch.tensor(lengths, device=device),), {"max_len": max_len}),
            expected=lambda device: {"mask": reference(lengths, max_len, device)},
            compare=assert_equal_mask,
            sizes=case,
        )


@convention("`lengths` is never changed in place.", zh="不修改 lengths")
def test_does_not_modify_lengths(kata, rng):
    case = SPEC.cases.random(rng, 1)[0]
    lengths = torch.tensor(case["lengths"]) + 1
    with case.judged():
        MASK.judging_inputs(kata, lengths, sizes=case)

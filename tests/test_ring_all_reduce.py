"""ring_all_reduce: judged on worlds of 1 to 4 ranks (gloo, forked, judge/worlds.py) against
the float64 sum of every rank's input, and by the messages each rank sent and received."""

from collections.abc import Iterator

import torch
import torch.distributed as dist

from judge.forbidden import COLLECTIVES
from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, call_repr, check_tensor_kind
from judge.testing.scenarios import world_scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core
from judge.testing.traffic import messages
from judge.testing.world_cases import play_by_world

DTYPES = (torch.float64, torch.float32)  # float64 first: its cases start with the named edge cases


def draw(rng, count):
    shapes = [(rng.randint(1, 9),), (rng.randint(1, 5), rng.randint(1, 7)), (rng.randint(1, 4), 3, rng.randint(1, 4))]
    return [{"world": rng.choice((2, 3, 4)), "shape": rng.choice(shapes), "transposed": False} for _ in range(count)]


def benchmark(kata, device):
    """On every rank of a world of 2: the kata's ring against gloo's own all-reduce (in place on
    a copy) of 1M float32 elements (4 MB)."""
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(dist.get_rank()))

    def reference():
        copy = x.clone()
        dist.all_reduce(copy)
        return copy

    return (lambda: kata.ring_all_reduce(x)), reference


benchmark.world_size = 2  # ranks in the benchmark's world (judge.timing.measure_world): one a core here
benchmark.number = 10  # calls per round, the same on every rank


SPEC = KataSpec(
    kata="ring_all_reduce",
    symbol="ring_all_reduce",
    reference="the float64 sum of every rank's input (exact for int64); each rank's messages counted",
    forbidden=COLLECTIVES,
    tolerances={},  # per case: 4 * N * eps(dtype) * max|x| (ring_tolerance), int64 exact
    per_case_tolerance=True,
    tolerance_note="atol 4 N eps(dtype) max|x| over every rank's input, rtol 0 (the ring's order of "
    "additions differs from a plain sum); int64 exact",
    cases=CaseTable(
        draw=draw,
        edges=(
            edge("size not divisible by N", "元素数不能被 N 整除", world=4, shape=(10,), transposed=False),
            edge("fewer elements than ranks", "元素少于 rank 数（空块）", world=4, shape=(2,), transposed=False),
            edge("non-contiguous 3-D input", "非连续的 3 维输入", world=3, shape=(4, 3, 5), transposed=True),
            edge("two ranks, odd size", "两个 rank，奇数长度", world=2, shape=(7,), transposed=False),
            edge("world size 1", "只有 1 个进程", world=1, shape=(5,), transposed=False),
        ),
        draws=3,
    ),
    world=True,
    benchmark=benchmark,
)


def inputs(case, dtype, seed: int) -> list[torch.Tensor]:
    """Each rank's input: values of both signs, not rounded (sums show the ring's order)."""
    generator = torch.Generator().manual_seed(seed)
    shape = case["shape"]
    if dtype == torch.int64:
        return [torch.randint(-(1 << 40), 1 << 40, shape, generator=generator) for _ in range(case["world"])]
    return [torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype) for _ in range(case["world"])]


@world_scenario
def reduced(kata, cases: list) -> list:
    """On every rank: for each case, this rank's input (transposed when the case says so),
    the kata's sum, the input after the call and the messages it sent and received."""
    rank = dist.get_rank()
    played = []
    for each in cases:
        tensor = each["inputs"][rank]
        if each["transposed"]:
            tensor = tensor.transpose(0, -1)  # the same values, not contiguous
        with messages() as log:
            result = kata.ring_all_reduce(tensor)
        played.append({"sum": result, "input after": tensor, "messages": log})
    return played


def play(kata, cases: list, seed: int) -> Iterator[tuple]:
    """(case, its inputs, [each rank's play]) for every case (each names its dtype), one world
    per world size: a world costs 0.1-0.3 s, the cases in it next to nothing."""
    prepared = [(case, inputs(case, case["dtype"], seed + n)) for n, case in enumerate(cases)]
    return play_by_world(kata, reduced, prepared, lambda case, given: {"inputs": given, **flags(case)}, SPEC)


def expected_sum(given: list[torch.Tensor], transposed: bool) -> torch.Tensor:
    total = torch.stack([x.double() if x.is_floating_point() else x for x in given]).sum(0)
    total = total.transpose(0, -1) if transposed else total
    return total.to(given[0].dtype) if not given[0].is_floating_point() else total


def ring_tolerance(given: list[torch.Tensor]) -> dict:
    """4 N eps(dtype) max|x|: the ring adds in another order than a plain sum."""
    if not given[0].is_floating_point():
        return {"rtol": 0.0, "atol": 0.0}
    largest = max((float(x.abs().max()) for x in given if x.numel()), default=0.0)
    return {"rtol": 0.0, "atol": 4 * len(given) * torch.finfo(given[0].dtype).eps * max(largest, 1e-30)}


def replay_of(case, given):
    """What a known slip gives on this case: each rank's sum, and the traffic's first fault."""

    def replay(implementation):
        plays = [play[0] for play in reduced(implementation, case["world"], [{"inputs": given, **flags(case)}])]
        found = {f"sum on rank {rank}": as_compared(play["sum"]) for rank, play in enumerate(plays)}
        found |= {f"input after on rank {rank}": play["input after"] for rank, play in enumerate(plays)}
        return found | {"traffic": traffic_fault(case, given, [play["messages"] for play in plays])}

    return replay


def flags(case) -> dict:
    return {"transposed": case["transposed"]}


def as_compared(value):
    """A sum as the checks compare it: floating point in float64."""
    return value.double() if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def call_text(case, given) -> str:
    tensor = given[0].transpose(0, -1) if case["transposed"] else given[0]
    call = call_repr("ring_all_reduce", tensor)
    return pick(f"{call} on each of {case['world']} ranks", f"在 {case['world']} 个 rank 上各调用 {call}")


def check_sums(case, given, plays, *, exact_dtype: bool) -> None:
    expected = expected_sum(given, case["transposed"])
    for rank, play in enumerate(plays):
        got = play["sum"]
        what = f"sum on rank {rank}"
        call = call_text(case, given) + pick(f", rank {rank}", f"，rank {rank}")
        if isinstance(got, torch.Tensor) and not exact_dtype and got.dtype != expected.dtype:
            got = got.to(expected.dtype)  # the core tier judges values; the dtype is a convention
        check_tensor_kind(got, expected.to(given[0].dtype) if exact_dtype else expected, call=call, what=what)
        assert_close(
            as_compared(got),
            as_compared(expected),
            call=call,
            what=what,
            tolerance=ring_tolerance(given),
            hint=pick(
                "every rank must end with the whole sum: reduce-scatter (N - 1 steps of adding what "
                "arrives from the left) then all-gather (N - 1 steps of forwarding the summed chunks)",
                "每个 rank 最后都要拿到完整的和：先 reduce-scatter（N - 1 步，把从左边收到的加上），"
                "再 all-gather（N - 1 步，转发已经加完的块）",
            ),
        )


def traffic_fault(case, given, logs: list) -> str:
    """The first way the ranks' messages break the ring's rules, or "" when they keep them."""
    world = case["world"]
    numel = given[0].numel()
    sizes = {chunk.numel() for chunk in torch.tensor_split(torch.empty(numel), world)} - {0}
    sent = 0
    for rank, log in enumerate(logs):
        right, left = (rank + 1) % world, (rank - 1) % world
        for what, peer, elements in log:
            if what == "send" and peer != right:
                return pick(
                    f"rank {rank} sent to rank {peer}; in a ring it sends only to its right neighbour {right}",
                    f"rank {rank} 发给了 rank {peer}；环中它只能发给右邻居 {right}",
                )
            if what == "recv" and peer != left:
                return pick(
                    f"rank {rank} received from rank {peer}; in a ring it receives only from its left neighbour {left}",
                    f"rank {rank} 从 rank {peer} 接收；环中它只能从左邻居 {left} 接收",
                )
            if what not in ("send", "recv"):
                return pick(f"rank {rank} called c10d::{what}", f"rank {rank} 调用了 c10d::{what}")
            if elements not in sizes:
                chunks = sorted(sizes) or [0]
                return pick(
                    f"rank {rank} sent or received a message of {elements} elements; each message is one "
                    f"chunk of torch.tensor_split(flat, {world}) (sizes {chunks}), empty chunks not sent",
                    f"rank {rank} 收发了一条 {elements} 个元素的消息；每条消息应是 torch.tensor_split(flat, {world}) "
                    f"的一块（大小 {chunks}），空块不发",
                )
            sent += elements if what == "send" else 0
    if sent != 2 * (world - 1) * numel:
        want = 2 * (world - 1) * numel
        return pick(
            f"the ranks sent {sent} elements in all; a ring all-reduce of {numel} elements over {world} ranks "
            f"sends 2 (N - 1) numel = {want} (N - 1 steps of reduce-scatter, N - 1 of all-gather, one chunk each)",
            f"所有 rank 一共发送了 {sent} 个元素；{numel} 个元素在 {world} 个 rank 上的环形 all-reduce "
            f"应发送 2 (N - 1) numel = {want} 个（reduce-scatter N - 1 步，all-gather N - 1 步，每步一块）",
        )
    received = sum(elements for log in logs for what, _, elements in log if what == "recv")
    if received != sent:
        return pick(
            f"the ranks received {received} elements but sent {sent}",
            f"所有 rank 接收了 {received} 个元素，却发送了 {sent} 个",
        )
    return ""


def check_traffic(case, given, plays) -> None:
    fault = traffic_fault(case, given, [play["messages"] for play in plays])
    if fault:
        raise Mismatch(f"{call_text(case, given)}: {fault}", what="traffic", actual=fault, expected="")


@core(zh="每个 rank 都得到所有 rank 输入之和（float32、float64）")
def test_every_rank_gets_the_sum_over_ranks(kata, rng, seed):
    cases = [
        case | {"dtype": dtype} for dtype in DTYPES for case in SPEC.cases.cases(rng, edges=dtype == torch.float64)
    ]
    for case, given, plays in play(kata, cases, seed):
        with case.judged(), SPEC.diagnosing(replay_of(case, given), sizes=case):
            check_sums(case, given, plays, exact_dtype=False)


@core(zh="只和左右邻居通信，每条消息是一块，总量 2(N-1)·numel")
def test_ranks_talk_only_to_their_neighbours_one_chunk_at_a_time(kata, rng, seed):
    cases = SPEC.cases.cases(rng)
    for case, given, plays in play(kata, [case | {"dtype": torch.float64} for case in cases], seed):
        with case.judged(), SPEC.diagnosing(replay_of(case, given), sizes=case):
            check_traffic(case, given, plays)


@convention("tensor is left unchanged (the sum is a new tensor).", zh="输入张量保持不变")
def test_the_input_is_left_unchanged(kata, seed):
    cases = [SPEC.cases.edges[0], SPEC.cases.edges[2]]  # fixed: a verdict that does not depend on the seed
    for case, given, plays in play(kata, [case | {"dtype": torch.float64} for case in cases], seed):
        with case.judged(), SPEC.diagnosing(replay_of(case, given), sizes=case):
            for rank, each in enumerate(plays):
                before = given[rank].transpose(0, -1) if case["transposed"] else given[rank]
                if not torch.equal(each["input after"], before):
                    raise Mismatch(
                        pick(
                            f"{call_text(case, given)}, rank {rank}, modified its `tensor` argument in place; "
                            "sum into a copy (the caller's tensor is theirs)",
                            f"{call_text(case, given)}，rank {rank} 原地修改了参数 `tensor`；请在副本上求和（调用者的张量归调用者）",
                        ),
                        what=f"input after on rank {rank}",
                        actual=each["input after"],
                        expected=before,
                        tolerance={"rtol": 0.0, "atol": 0.0},
                    )


@convention(
    "int64 tensors are summed exactly, and the result keeps the input's dtype.", zh="int64 精确求和，dtype 不变"
)
def test_int64_sums_are_exact_and_dtypes_kept(kata, seed):
    cases = [SPEC.cases.edges[0], SPEC.cases.edges[3]]
    typed = [case | {"dtype": dtype} for dtype in (torch.int64, torch.float32) for case in cases]
    for case, given, plays in play(kata, typed, seed):
        with case.judged():
            check_sums(case, given, plays, exact_dtype=True)


@convention("a 0-d tensor gives a 0-d sum, an empty tensor an empty one (no message).", zh="0 维与空张量")
def test_zero_dimensional_and_empty_tensors(kata, seed):
    cases = [edge("0-d tensor", "0 维张量", world=3, shape=(), transposed=False)]
    cases.append(edge("empty tensor", "空张量", world=2, shape=(0, 3), transposed=False))
    for case, given, plays in play(kata, [case | {"dtype": torch.float64} for case in cases], seed):
        with case.judged():
            check_sums(case, given, plays, exact_dtype=True)
            check_traffic(case, given, plays)

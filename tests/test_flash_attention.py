"""flash_attention: judged against F.scaled_dot_product_attention and torch.logsumexp in float64,
and by what it creates.

Values: the output is compared with F.scaled_dot_product_attention computed in float64 from
the very inputs the kata gets (rounded to the inputs' dtype), the logsumexp with
torch.logsumexp of the scaled (and, under is_causal, masked) scores in float64. For float32
inputs the logsumexp may come back in float32 or float64 (a float64 one is rounded to
float32, then compared). The core tier judges float64 results with float32's tolerance (see
FLOAT64_RULE); one convention test holds them to float64's.

Structure: a TorchDispatchMode (`CreatedTensors`, judge/testing/tracing.py) sees every aten
op the kata's call runs. It runs inside the scenario `traced`, where the kata lives, and what it recorded comes back as data (the kata
process's word, as any scenario's result):
- the largest tensor it creates (views and in-place results share an input's storage and
  are not new): at lengths where the full score matrix is large, none may hold as many
  elements as [..., L, S], a full [L, S] mask included (lead () makes one count);
- the score elements computed: the outputs of the matrix products that contract over the
  head size E (E is chosen larger than block_size there, so `p @ value`, which contracts
  over at most block_size keys, is never counted). One pass computes each score once; under
  is_causal a key block entirely in the future is never computed: at most L times the keys
  of the blocks that start before position L, per leading index, which is what a kata that
  processes all queries against each key block computes (tiling the queries too computes
  fewer).

Every check runs inside a diagnosis whose replay runs the very same scenario (traced where
the check is structural) with another implementation.
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import ATTENTION, Rules
from judge.language import pick
from judge.testing.attention import relative_scale
from judge.testing.checks import Mismatch, call_repr, describe
from judge.testing.functions import FunctionKata
from judge.testing.inputs import causal_blocked, randn
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype
from judge.testing.tracing import CreatedTensors, largest_tensor_note

FULL = (torch.float32, torch.float64)

# (rtol, atol) of the output and the logsumexp, by the inputs' dtype, against the float64
# references rounded to it. Measured over 100 seeds of this file's cases (both dtypes,
# is_causal on and off, custom scales half the time, L = S = 512 every tenth seed), the worst
# |error| / (atol + rtol |expected|) of the solution and both variants: float32 0.16
# (output, the running-logsumexp variant; the solution 0.10) and 0.07 (logsumexp); float64
# 0.043 (output) and 0.008 (logsumexp). float32 is about 2x PyTorch's single-op defaults
# (a sum rescaled block after block); float64 is tight enough that float64 inputs computed
# through float32 are off by millions of it (the float64 rule's test; the core tier judges
# float64 results with float32's).
TOLERANCES = per_dtype(float64=(1e-13, 1e-13), float32=(2.5e-6, 2e-5))


# --------------------------------------------------------------------------- the cases


def hidden_cases(rng, count: int) -> list[dict]:
    """Leading dims (), (B,) or (B, H) of 2 to 4, then L, S, E and Ev, all different, 6 to 29;
    a block_size of 3 to 9 that divides neither L nor S where one exists. The first draw has
    L < S, the second L > S."""
    cases = []
    for index, n_lead in enumerate(rng.choices([0, 1, 2, 2], k=count)):
        lead = rng.sample(range(2, 5), n_lead)
        L, S, E, Ev = rng.sample(range(6, 30), 4)
        if index < 2 and (L < S) != (index == 0):
            L, S = S, L
        blocks = [b for b in range(3, 10) if L % b and S % b] or list(range(3, 10))
        cases.append({"lead": lead, "L": L, "S": S, "E": E, "Ev": Ev, "block": rng.choice(blocks)})
    return cases


# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("blocks that divide neither L nor S, two leading dims", "块大小既不整除 L 也不整除 S，两个前导维",
         lead=[2, 3], L=23, S=19, E=8, Ev=6, block=5),
    edge("more keys than queries: whole key blocks in the future", "键比查询多：有整块的键位于未来",
         lead=[3], L=6, S=17, E=5, Ev=7, block=4),
    edge("blocks that divide L and S exactly", "块大小恰好整除 L 和 S",
         lead=[2], L=12, S=8, E=6, Ev=9, block=4),
    edge("block_size 1, head size 1", "block_size 为 1，头维度为 1",
         lead=[2], L=5, S=7, E=1, Ev=2, block=1),
    edge("one query, no leading dims, a block larger than S", "只有一个查询，没有前导维，块比 S 大",
         lead=[], L=1, S=6, E=4, Ev=3, block=8),
    edge("one key, value size 1, a leading dim of 1", "只有一个键，value 维度为 1，有一个大小为 1 的前导维",
         lead=[4, 1], L=7, S=1, E=3, Ev=1, block=3),
)
# fmt: on


def make_inputs(gen, case, dtype, device="cpu"):
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    return query, key, value


# --------------------------------------------------------------------------- benchmark


def benchmark(kata, device):
    """(kata call, reference call, notes) at a realistic size: batch 2, 4 heads, L = S = 1024,
    head size 64, causal, the default block_size (64), next to PyTorch's fused kernel. The
    notes give the largest tensor the kata creates next to a naive attention's [B, H, L, S]
    scores."""
    gen = torch.Generator().manual_seed(0)
    query, key, value = (randn(gen, 2, 4, 1024, 64, device=device) for _ in range(3))

    def notes() -> dict:
        naive = 2 * 4 * 1024 * 1024 * query.element_size()
        return largest_tensor_note(lambda: kata.flash_attention(query, key, value, is_causal=True), naive)

    return (
        (lambda: kata.flash_attention(query, key, value, is_causal=True)),
        (lambda: F.scaled_dot_product_attention(query, key, value, is_causal=True)),
        notes,
    )


SPEC = KataSpec(
    kata="flash_attention",
    symbol="flash_attention",
    reference=(
        "F.scaled_dot_product_attention and torch.logsumexp of the scaled, masked scores in float64; "
        "the tensors the kata creates, traced"
    ),
    forbidden=ATTENTION + Rules(threads=False),  # the tracer sees the calling thread only
    tolerances=TOLERANCES,
    tolerance_note=(
        "output and logsumexp against float64 references, rescaled block after block: the solution and "
        "variants measured at most 0.16 of these in float32 and 0.043 in float64 (L = S = 512 included)"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=4),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


@scenario
def traced(kata, query, key, value, head_size, kwargs: dict) -> dict:
    """kata.flash_attention(query, key, value, **kwargs) under a CreatedTensors of its own:
    its result, and what the tracer saw it create (see the module docstring)."""
    tracer = CreatedTensors(head_size)
    with tracer:
        result = kata.flash_attention(query, key, value, **kwargs)
    return {"result": result, "seen": tracer.seen()}


# --------------------------------------------------------------------------- calls and checks


def outputs(result, text: str) -> dict:
    """{output, logsumexp} of a result, its form checked. A float64 logsumexp beside a float32
    output (float32 inputs) is accepted: it is rounded to float32, what it is compared in."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(
            pick(
                f"{text} returned {describe(result)}; expected a pair (output, logsumexp)",
                f"{text} 返回了 {describe(result)}；应返回一对 (output, logsumexp)",
            )
        )
    output, logsumexp = result
    if isinstance(output, torch.Tensor) and isinstance(logsumexp, torch.Tensor):
        if output.dtype == torch.float32 and logsumexp.dtype == torch.float64:
            logsumexp = logsumexp.to(torch.float32)
    return {"output": output, "logsumexp": logsumexp}


FLASH = FunctionKata(SPEC, outputs=outputs, parameters={"flash_attention": ("query", "key", "value")})


def reference(query, key, value, *, is_causal=False, scale=None, **_):
    """(output, logsumexp) in float64 on the inputs' device: F.scaled_dot_product_attention,
    and torch.logsumexp of the scaled, masked scores."""
    q, k, v = (t.double() for t in (query, key, value))
    output = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
    if is_causal:
        scores = scores.masked_fill(causal_blocked(q.size(-2), k.size(-2)).to(q.device), float("-inf"))
    return output, torch.logsumexp(scores, dim=-1)


def sizes(query, key, value, block_size=64) -> dict:
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1), "block": block_size}


def judge_values(call, got: dict, want_output, want_logsumexp, dtype, *, float64_throughout=False):
    """Both results in the inputs' dtype, with the tolerance of the tier (see FLOAT64_RULE)."""
    tolerance = SPEC.tolerance(dtype, float64_throughout=float64_throughout)
    SPEC.assert_close(got["output"], want_output.to(dtype), call=call, what="output", tolerance=tolerance)
    SPEC.assert_close(got["logsumexp"], want_logsumexp.to(dtype), call=call, what="logsumexp", tolerance=tolerance)


def check_against_pytorch(kata, query, key, value, *, float64_throughout=False, **kwargs):
    want_output, want_logsumexp = reference(query, key, value, **kwargs)
    block = kwargs.get("block_size", 64)
    with FLASH.judging(kata, query, key, value, sizes=sizes(query, key, value, block), **kwargs) as call:
        judge_values(
            call.text, call.outputs, want_output, want_logsumexp, query.dtype, float64_throughout=float64_throughout
        )


def allowed_scores(lead, L: int, S: int, block: int, is_causal: bool) -> int:
    """What processing all L queries against each key block computes: every block, or under
    is_causal only those that start before position L (the others are entirely in the future)."""
    keys = sum(min(block, S - k0) for k0 in range(0, S, block) if not is_causal or k0 < L)
    return math.prod(lead) * L * keys


def largest_fingerprint(seen: dict) -> torch.Tensor:
    """(elements, bytes per element) of the largest tensor created, for the diagnosis."""
    return torch.tensor(seen["largest"])


def score_fingerprint(seen: dict, full: int) -> torch.Tensor:
    """(scores computed, whether a tensor as large as the full [..., L, S] was created), for
    the diagnosis: computing future blocks and plain attention compute as many."""
    return torch.tensor([seen["scores"], int(seen["largest"][0] >= full)])


def traced_call(implementation, query, key, value, head_size, kwargs: dict) -> tuple:
    """(call, {output, logsumexp}, what the tracer saw) of the traced scenario."""
    text = call_repr("flash_attention", query, key, value, **kwargs)
    got = traced(implementation, query, key, value, head_size, kwargs)
    return text, outputs(got["result"], text), got["seen"]


def traced_check(kata, query, key, value, *, memory=False, scores=False, **kwargs) -> None:
    """Values as everywhere, then what the call created: with `memory`, never a tensor as large
    as the full [..., L, S] score matrix; with `scores` (E > block_size needed), no more scores
    than `allowed_scores`."""
    lead, (L, E), S = list(query.shape[:-2]), query.shape[-2:], key.size(-2)
    block, is_causal = kwargs.get("block_size", 64), kwargs.get("is_causal", False)
    full, allowed = math.prod(lead) * L * S, allowed_scores(lead, L, S, block, is_causal)
    assert not scores or E > block, "scores are counted where only they contract over E"
    want_output, want_logsumexp = reference(query, key, value, **kwargs)
    head_size = E if scores else None

    def replay(implementation) -> dict:
        _, found, seen = traced_call(implementation, query, key, value, head_size, kwargs)
        return found | {"largest tensor": largest_fingerprint(seen), "scores computed": score_fingerprint(seen, full)}

    with SPEC.diagnosing(replay, sizes(query, key, value, block)):
        call, got, seen = traced_call(kata, query, key, value, head_size, kwargs)
        judge_values(call, got, want_output, want_logsumexp, query.dtype)
        largest = tuple(seen["largest"])
        if seen["opaque"]:
            raise AssertionError(
                pick(
                    f"{call} ran {seen['opaque']}, an operator of its own: what it creates inside cannot be "
                    "traced, so its memory and scores cannot be judged; write the blocks in PyTorch operations",
                    f"{call} 运行了自定义算子 {seen['opaque']}：它在内部创建的张量无法追踪，"
                    "因此无法评判其内存和分数计算；请用 PyTorch 运算来写各个分块",
                )
            )
        if memory and largest[0] >= full:
            raise Mismatch(
                pick(
                    f"{call} created a tensor of {largest[0]} elements ({seen['largest_what']}): as many as "
                    f"the full [..., L, S] score matrix {lead + [L, S]} ({full}); keep at most a [..., L, block_size] "
                    "slab of scores at a time, and build masks per block, never a whole [L, S] one",
                    f"{call} 创建了一个有 {largest[0]} 个元素的张量（{seen['largest_what']}）：与完整的 [..., L, S] "
                    f"分数矩阵 {lead + [L, S]}（{full}）一样大；同一时刻最多只保留一片 [..., L, block_size] 的分数，"
                    "并逐块构造掩码，绝不构造完整的 [L, S] 掩码",
                ),
                what="largest tensor",
                actual=largest_fingerprint(seen),
                expected=None,
            )
        if scores and seen["scores"] > allowed:
            if not is_causal or allowed == full:
                why = pick(
                    f"there are {full} (L x S per leading index): compute each once, in one pass over the key blocks",
                    f"分数共有 {full} 个（每个前导下标 L x S 个）：在对键块的一趟遍历中，每个分数只算一次",
                )
            else:
                per_row = allowed // (math.prod(lead) * L)
                why = pick(
                    f"under is_causal only the key blocks that start before position L = {L} hold a key some query "
                    f"sees ({per_row} keys per query): skip the blocks entirely in the future (don't compute them "
                    "and mask them), and compute each score once, in one pass",
                    f"在 is_causal 下，只有起始位置在 L = {L} 之前的键块含有某个查询能看到的键"
                    f"（每个查询 {per_row} 个键）：跳过完全位于未来的块（不要先算出来再掩掉），"
                    "并在一趟遍历中每个分数只算一次",
                )
            raise Mismatch(
                pick(
                    f"{call} computed {seen['scores']} scores (elements of query x key products), more than the "
                    f"{allowed} needed; {why}",
                    f"{call} 计算了 {seen['scores']} 个分数（query x key 乘积的元素），多于所需的 {allowed} 个；{why}",
                ),
                what="scores computed",
                actual=score_fingerprint(seen, full),
                expected=None,
            )


# --------------------------------------------------------------------------- tests


@core(zh="无掩码时与 PyTorch 一致")
@dtypes(*FULL)
def test_matches_pytorch_without_a_mask(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), block_size=case["block"])


@core(zh="is_causal 以左上角对齐")
@dtypes(*FULL)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            inputs = make_inputs(gen, case, dtype, device)
            check_against_pytorch(kata, *inputs, is_causal=True, block_size=case["block"])


@core(zh="自定义 scale 取代默认值")
@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    """Scales 0.4x to 2.2x the default 1/sqrt(E), so the softmax neither saturates nor stays flat."""
    for case in SPEC.cases.cases(rng, edges=dtype == torch.float32):
        with case.judged():
            for is_causal in (False, True):
                scale = relative_scale(rng, case["E"])
                inputs = make_inputs(gen, case, dtype, device)
                check_against_pytorch(kata, *inputs, is_causal=is_causal, scale=scale, block_size=case["block"])


@core(zh="从不创建与分数矩阵一样大的张量")
def test_never_creates_a_tensor_as_large_as_the_score_matrix(kata, rng, gen):
    """L = S = 512 under is_causal with the default block_size (64) and no leading dims, where a
    whole [L, S] mask is as large as the scores; then without a mask, two leading dims, L != S.
    What the call created is recorded by a tracer inside the scenario, where the kata runs: the
    kata's word, as any scenario's result."""
    query, key, value = make_inputs(gen, {"lead": [], "L": 512, "S": 512, "E": 64, "Ev": 64}, torch.float32)
    traced_check(kata, query, key, value, memory=True, is_causal=True)
    case = {"lead": [2, 2], "L": rng.randrange(280, 320), "S": rng.randrange(240, 270), "E": 40, "Ev": 24}
    traced_check(kata, *make_inputs(gen, case, torch.float32), memory=True, block_size=48)


@core(zh="每个分数在一趟遍历中只计算一次")
def test_each_score_is_computed_once_in_one_pass(kata, rng, gen):
    """Without a mask every score is needed, once: a first pass for the max and a second for the
    sums would compute them twice. The scores are counted by a tracer inside the scenario, where
    the kata runs: the kata's word, as any scenario's result."""
    case = {"lead": [2], "L": 37, "S": 90, "E": 24, "Ev": 7}
    traced_check(kata, *make_inputs(gen, case, torch.float32), scores=True, block_size=16)
    case = {"lead": [3], "L": 26, "S": 26, "E": 11, "Ev": 5}
    traced_check(
        kata, *make_inputs(gen, case, torch.float64), scores=True, is_causal=True, block_size=rng.choice([5, 7])
    )


@core(zh="完全位于未来的键块从不计算")
def test_key_blocks_entirely_in_the_future_are_never_computed(kata, rng, gen):
    """More keys than queries under is_causal: the key blocks that start at or after L hold
    no key any query sees. E is larger than block_size, so only scores contract over it. The
    scores are counted by a tracer inside the scenario, where the kata runs: the kata's word,
    as any scenario's result."""
    block = rng.randrange(4, 9)
    L = rng.randrange(block + 2, 4 * block)
    drawn = {"lead": [2], "L": L, "S": L + rng.randrange(3 * block, 6 * block), "E": block + rng.randrange(3, 9)}
    for case in ({"lead": [2], "L": 40, "S": 200, "E": 24, "block": 16}, drawn | {"block": block}):
        query, key, value = make_inputs(gen, case | {"Ev": 5}, torch.float32)
        traced_check(kata, query, key, value, scores=True, is_causal=True, block_size=case["block"])


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """Every edge case and two draws, with and without is_causal, held to float64's tolerance."""
    for case in SPEC.cases.cases(rng, 2):
        with case.judged():
            for is_causal in (False, True):
                inputs = make_inputs(gen, case, torch.float64)
                check_against_pytorch(
                    kata, *inputs, is_causal=is_causal, block_size=case["block"], float64_throughout=True
                )


@convention("block_size < 1 raises ValueError.", zh="block_size 小于 1 时抛出 ValueError")
def test_block_size_below_1_raises_value_error(kata, rng, gen):
    query, key, value = make_inputs(gen, {"lead": [2], "L": 3, "S": 4, "E": 5, "Ev": 2}, torch.float32)
    for block_size in (0, -rng.randrange(1, 5)):
        FLASH.assert_raises(
            kata,
            ValueError,
            query,
            key,
            value,
            block_size=block_size,
            reason=pick("block_size must be at least 1", "block_size 至少为 1"),
        )


@convention("results are made on the inputs' device.", zh="结果跟随输入所在的设备")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """Running statistics and masks made inside the kata must be made on the inputs' device.
    Fixed sizes and inputs: a verdict on the meta stand-in must not depend on the seed."""
    case = SPEC.cases.edges[0]
    inputs = make_inputs(torch.Generator().manual_seed(0), case, torch.float32)
    kwargs = {"is_causal": True, "block_size": case["block"]}

    def expected(device) -> dict:
        output, logsumexp = reference(*(t.to(device) for t in inputs), **kwargs)
        return {"output": output.float(), "logsumexp": logsumexp.float()}

    FLASH.on_device(
        kata,
        other_device,
        make=lambda device: (tuple(t.to(device) for t in inputs), kwargs),
        expected=expected,
        compare=SPEC.assert_close,
        sizes=sizes(*inputs, case["block"]),
    )


@convention("the inputs are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """In float64 under is_causal with a custom scale, and in float32 without a mask."""
    case = SPEC.cases.random(rng)[0]
    for dtype, kwargs in (
        (torch.float64, {"is_causal": True, "scale": relative_scale(rng, case["E"])}),
        (torch.float32, {}),
    ):
        query, key, value = make_inputs(gen, case, dtype)
        kwargs = kwargs | {"block_size": case["block"]}
        with FLASH.judging(kata, query, key, value, sizes=sizes(query, key, value, case["block"]), **kwargs) as call:
            FLASH.assert_inputs_unchanged(call, (query, key, value), {})

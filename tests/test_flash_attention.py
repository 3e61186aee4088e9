"""flash_attention: judged against F.scaled_dot_product_attention and torch.logsumexp in float64,
and by what it creates.

Values: the output is compared with F.scaled_dot_product_attention computed in float64 from
the very inputs the kata gets (rounded to the inputs' dtype), the logsumexp with
torch.logsumexp of the scaled (and, under is_causal, masked) scores in float64. For float32
inputs the logsumexp may come back in float32 or float64.

Structure: a TorchDispatchMode (`CreatedTensors` below: the judge has no tracer of its own,
so it lives here) sees every aten op the kata's call runs and records
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

Every check runs inside SPEC.diagnosing with a replay that makes the very same call (traced
where the check is structural) with another implementation, on copies taken before the
kata's call.
"""

import math

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode  # the tests may trace; the kata may not
from torch.utils._pytree import tree_flatten

from judge.forbidden import ATTENTION
from judge.remote.client import observe
from judge.testing.attention import relative_scale
from judge.testing.checks import (
    Mismatch,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import causal_blocked, randn
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

FULL = (torch.float32, torch.float64)
aten = torch.ops.aten

# (rtol, atol) of the output and the logsumexp, by the inputs' dtype, against the float64
# references rounded to it. Measured over 100 seeds of this file's cases (both dtypes,
# is_causal on and off, custom scales half the time, L = S = 512 every tenth seed), the worst
# |error| / (atol + rtol |expected|) of the solution and both variants: float32 0.16
# (output, the running-logsumexp variant; the solution 0.10) and 0.07 (logsumexp); float64
# 0.043 (output) and 0.008 (logsumexp). float32 is about 2x PyTorch's single-op defaults
# (a sum rescaled block after block); float64 is tight enough that float64 inputs computed
# through float32 are off by millions of it.
TOLERANCES = {
    torch.float64: {"rtol": 1e-13, "atol": 1e-13},
    torch.float32: {"rtol": 2.5e-6, "atol": 2e-5},
}


# --------------------------------------------------------------------------- the tracer

# The matrix products as the dispatch mode sees them (matmul, einsum, tensordot and linear
# decompose into these), with the index of the first factor: its last dimension is the one
# contracted.
PRODUCTS = {
    aten.mm: 0,
    aten.bmm: 0,
    aten.mv: 0,
    aten.dot: 0,
    aten.vdot: 0,
    aten.addmm: 1,
    aten.baddbmm: 1,
    aten.addbmm: 1,
    aten.addmv: 1,
}


class CreatedTensors(TorchDispatchMode):
    """Context manager: records what the ops run under it create. `largest` (elements, then
    bytes per element: a float [L, S] before a boolean one), `largest_bytes` and
    `largest_what` describe the largest new tensor: a view or an in-place result shares an
    input's storage and creates nothing. `scores` counts the elements of the matrix products
    that contract over `head_size` (the scores q . k)."""

    def __init__(self, head_size: int | None = None):
        super().__init__()
        self.head_size = head_size
        self.largest, self.largest_bytes, self.largest_what, self.scores = (0, 0), 0, "nothing", 0

    def fingerprint(self) -> torch.Tensor:
        """(elements, bytes per element) of the largest tensor created, for the diagnosis."""
        return torch.tensor(self.largest)

    def score_fingerprint(self, full: int) -> torch.Tensor:
        """(scores computed, whether a tensor as large as the full [..., L, S] was created),
        for the diagnosis: computing future blocks and plain attention compute as many."""
        return torch.tensor([self.scores, int(self.largest[0] >= full)])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        first = PRODUCTS.get(func.overloadpacket)
        if first is not None and self.head_size is not None and isinstance(result, torch.Tensor):
            factor = args[first]
            if isinstance(factor, torch.Tensor) and factor.dim() and factor.size(-1) == self.head_size:
                self.scores += result.numel()
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor) and t.numel() and not t.is_meta
        }
        for t in tree_flatten(result)[0]:
            if not isinstance(t, torch.Tensor) or t.is_meta or not t.numel():
                continue
            if t.untyped_storage().data_ptr() in inputs or (t.numel(), t.element_size()) <= self.largest:
                continue
            self.largest, self.largest_bytes = (t.numel(), t.element_size()), t.numel() * t.element_size()
            self.largest_what = f"{describe(t)}, made by {func.overloadpacket.__name__}"
        return result


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


EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("blocks that divide neither L nor S, two leading dims", lead=[2, 3], L=23, S=19, E=8, Ev=6, block=5),
    edge("more keys than queries: whole key blocks in the future", lead=[3], L=6, S=17, E=5, Ev=7, block=4),
    edge("blocks that divide L and S exactly", lead=[2], L=12, S=8, E=6, Ev=9, block=4),
    edge("block_size 1, head size 1", lead=[2], L=5, S=7, E=1, Ev=2, block=1),
    edge("one query, no leading dims, a block larger than S", lead=[], L=1, S=6, E=4, Ev=3, block=8),
    edge("one key, value size 1, a leading dim of 1", lead=[4, 1], L=7, S=1, E=3, Ev=1, block=3),
)


def make_inputs(gen, case, dtype, device="cpu"):
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    return query, key, value


# --------------------------------------------------------------------------- calls


def reference(query, key, value, *, is_causal=False, scale=None, **_):
    """(output, logsumexp) in float64 on the inputs' device: F.scaled_dot_product_attention,
    and torch.logsumexp of the scaled, masked scores."""
    q, k, v = (t.double() for t in (query, key, value))
    output = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
    if is_causal:
        scores = scores.masked_fill(causal_blocked(q.size(-2), k.size(-2)).to(q.device), float("-inf"))
    return output, torch.logsumexp(scores, dim=-1)


def traced_call(function, query, key, value, head_size, kwargs) -> tuple:
    """function(query, key, value, **kwargs) under a CreatedTensors of its own, run where the
    kata's code runs (in the kata process for the learner's): (its result, what it created)."""
    tracer = CreatedTensors(head_size)
    with tracer:
        result = function(query, key, value, **kwargs)
    seen = ("largest", "largest_bytes", "largest_what", "scores")
    return result, {name: getattr(tracer, name) for name in seen}


def call_kata(kata, query, key, value, tracer=None, **kwargs):
    """(call, output, logsumexp), every input checked unchanged afterwards; under `tracer`
    when one is given (only the kata's own call is traced)."""
    call = call_repr("flash_attention", query, key, value, **kwargs)

    def run():
        if tracer is None:
            return kata.flash_attention(query, key, value, **kwargs)
        result, seen = observe(kata, traced_call, kata.flash_attention, query, key, value, tracer.head_size, kwargs)
        vars(tracer).update(seen, largest=tuple(seen["largest"]))
        return result

    result = call_and_check_inputs(run, call, query=query, key=key, value=value)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(f"{call} returned {describe(result)}; expected a pair (output, logsumexp)")
    return call, result[0], result[1]


def replay(query, key, value, traced=False, head_size=None, **kwargs):
    """The same call with another implementation, on copies of the inputs taken now (for the
    diagnosis); when `traced`, with what it created too."""
    tensors = [query.clone(), key.clone(), value.clone()]

    def run(implementation) -> dict:
        tracer = CreatedTensors(head_size) if traced else None
        _, output, logsumexp = call_kata(implementation, *(t.clone() for t in tensors), tracer=tracer, **kwargs)
        found = {"output": output, "logsumexp": logsumexp}
        if tracer is not None:
            full = query[..., 0].numel() * key.size(-2)  # elements of [..., L, S]
            found |= {"largest tensor": tracer.fingerprint(), "scores computed": tracer.score_fingerprint(full)}
        return found

    return run


def sizes(query, key, value, block_size=64) -> dict:
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1), "block": block_size}


def logsumexp_dtype(got, dtype: torch.dtype) -> torch.dtype:
    """The inputs' dtype; float64 is accepted too for float32 inputs."""
    if dtype == torch.float32 and isinstance(got, torch.Tensor) and got.dtype == torch.float64:
        return torch.float64
    return dtype


def judge_values(call, output, logsumexp, want_output, want_logsumexp, dtype):
    tolerance = TOLERANCES[dtype]
    SPEC.assert_close(output, want_output.to(dtype), call=call, what="output", tolerance=tolerance)
    want_logsumexp = want_logsumexp.to(logsumexp_dtype(logsumexp, dtype))
    SPEC.assert_close(logsumexp, want_logsumexp, call=call, what="logsumexp", tolerance=tolerance)


def check_against_pytorch(kata, query, key, value, **kwargs):
    want_output, want_logsumexp = reference(query, key, value, **kwargs)  # first: the kata may break its inputs
    with SPEC.diagnosing(replay(query, key, value, **kwargs), sizes(query, key, value, kwargs.get("block_size", 64))):
        call, output, logsumexp = call_kata(kata, query, key, value, **kwargs)
        judge_values(call, output, logsumexp, want_output, want_logsumexp, query.dtype)


def allowed_scores(lead, L: int, S: int, block: int, is_causal: bool) -> int:
    """What processing all L queries against each key block computes: every block, or under
    is_causal only those that start before position L (the others are entirely in the future)."""
    keys = sum(min(block, S - k0) for k0 in range(0, S, block) if not is_causal or k0 < L)
    return math.prod(lead) * L * keys


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
    tracer = CreatedTensors(head_size)
    traced = replay(query, key, value, traced=True, head_size=head_size, **kwargs)
    with SPEC.diagnosing(traced, sizes(query, key, value, block)):
        call, output, logsumexp = call_kata(kata, query, key, value, tracer=tracer, **kwargs)
        judge_values(call, output, logsumexp, want_output, want_logsumexp, query.dtype)
        if memory and tracer.largest[0] >= full:
            raise Mismatch(
                f"{call} created a tensor of {tracer.largest[0]} elements ({tracer.largest_what}): as many as "
                f"the full [..., L, S] score matrix {lead + [L, S]} ({full}); keep at most a [..., L, block_size] "
                "slab of scores at a time, and build masks per block, never a whole [L, S] one",
                what="largest tensor",
                actual=tracer.fingerprint(),
                expected=None,
            )
        if scores and tracer.scores > allowed:
            if not is_causal or allowed == full:
                why = f"there are {full} (L x S per leading index): compute each once, in one pass over the key blocks"
            else:
                per_row = allowed // (math.prod(lead) * L)
                why = (
                    f"under is_causal only the key blocks that start before position L = {L} hold a key some query "
                    f"sees ({per_row} keys per query): skip the blocks entirely in the future (don't compute them "
                    "and mask them), and compute each score once, in one pass"
                )
            raise Mismatch(
                f"{call} computed {tracer.scores} scores (elements of query x key products), more than the "
                f"{allowed} needed; {why}",
                what="scores computed",
                actual=tracer.score_fingerprint(full),
                expected=None,
            )


# --------------------------------------------------------------------------- benchmark


def benchmark(kata, device):
    """(kata call, reference call, notes) at a realistic size: batch 2, 4 heads, L = S = 1024,
    head size 64, causal, the default block_size (64), next to PyTorch's fused kernel. The
    notes give the largest tensor the kata creates next to a naive attention's [B, H, L, S]
    scores."""
    gen = torch.Generator().manual_seed(0)
    query, key, value = (randn(gen, 2, 4, 1024, 64, device=device) for _ in range(3))

    def notes() -> dict:
        tracer = CreatedTensors()
        with torch.no_grad(), tracer:
            kata.flash_attention(query, key, value, is_causal=True)
        naive = 2 * 4 * 1024 * 1024 * query.element_size()
        return {"largest tensor": f"{tracer.largest_bytes / 1e6:.2g} MB vs {naive / 1e6:.2g} MB naive scores"}

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
    forbidden=ATTENTION,
    tolerances=TOLERANCES,
    tolerance_note=(
        "output and logsumexp against float64 references, rescaled block after block: the solution and "
        "variants measured at most 0.16 of these in float32 and 0.043 in float64 (L = S = 512 included)"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=4),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- tests


@dtypes(*FULL)
def test_matches_pytorch_without_a_mask(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), block_size=case["block"])


@dtypes(*FULL)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            inputs = make_inputs(gen, case, dtype, device)
            check_against_pytorch(kata, *inputs, is_causal=True, block_size=case["block"])


@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    """Scales 0.4x to 2.2x the default 1/sqrt(E), so the softmax neither saturates nor stays flat."""
    for case in SPEC.cases.cases(rng, edges=dtype == torch.float32):
        with case.judged():
            for is_causal in (False, True):
                scale = relative_scale(rng, case["E"])
                inputs = make_inputs(gen, case, dtype, device)
                check_against_pytorch(kata, *inputs, is_causal=is_causal, scale=scale, block_size=case["block"])


def test_never_creates_a_tensor_as_large_as_the_score_matrix(kata, rng, gen):
    """L = S = 512 under is_causal with the default block_size (64) and no leading dims, where a
    whole [L, S] mask is as large as the scores; then without a mask, two leading dims, L != S."""
    query, key, value = make_inputs(gen, {"lead": [], "L": 512, "S": 512, "E": 64, "Ev": 64}, torch.float32)
    traced_check(kata, query, key, value, memory=True, is_causal=True)
    case = {"lead": [2, 2], "L": rng.randrange(280, 320), "S": rng.randrange(240, 270), "E": 40, "Ev": 24}
    traced_check(kata, *make_inputs(gen, case, torch.float32), memory=True, block_size=48)


def test_each_score_is_computed_once_in_one_pass(kata, rng, gen):
    """Without a mask every score is needed, once: a first pass for the max and a second for the
    sums would compute them twice."""
    case = {"lead": [2], "L": 37, "S": 90, "E": 24, "Ev": 7}
    traced_check(kata, *make_inputs(gen, case, torch.float32), scores=True, block_size=16)
    case = {"lead": [3], "L": 26, "S": 26, "E": 11, "Ev": 5}
    traced_check(
        kata, *make_inputs(gen, case, torch.float64), scores=True, is_causal=True, block_size=rng.choice([5, 7])
    )


def test_key_blocks_entirely_in_the_future_are_never_computed(kata, rng, gen):
    """More keys than queries under is_causal: the key blocks that start at or after L hold
    no key any query sees. E is larger than block_size, so only scores contract over it."""
    block = rng.randrange(4, 9)
    L = rng.randrange(block + 2, 4 * block)
    drawn = {"lead": [2], "L": L, "S": L + rng.randrange(3 * block, 6 * block), "E": block + rng.randrange(3, 9)}
    for case in ({"lead": [2], "L": 40, "S": 200, "E": 24, "block": 16}, drawn | {"block": block}):
        query, key, value = make_inputs(gen, case | {"Ev": 5}, torch.float32)
        traced_check(kata, query, key, value, scores=True, is_causal=True, block_size=case["block"])


def test_block_size_below_1_raises_value_error(kata, rng, gen):
    query, key, value = make_inputs(gen, {"lead": [2], "L": 3, "S": 4, "E": 5, "Ev": 2}, torch.float32)
    for block_size in (0, -rng.randrange(1, 5)):
        call = call_repr("flash_attention", query, key, value, block_size=block_size)

        def check(implementation, block_size=block_size, call=call) -> dict:
            assert_raises_value_error(
                lambda: implementation.flash_attention(
                    query.clone(), key.clone(), value.clone(), block_size=block_size
                ),
                call=call,
                reason="block_size must be at least 1",
            )
            return {}

        with SPEC.diagnosing(check, {"block": block_size}):
            check(kata)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """Running statistics and masks made inside the kata must be made on the inputs' device."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, other_device)
    kwargs = {"is_causal": True, "block_size": case["block"]}
    if other_device != "meta":
        check_against_pytorch(kata, *inputs, **kwargs)
        return
    query, _, value = inputs  # meta tensors have a shape and a device but no values
    with SPEC.diagnosing(replay(*inputs, **kwargs), sizes(*inputs, case["block"])):
        call, output, logsumexp = call_on_device(lambda: call_kata(kata, *inputs, **kwargs), other_device)
        check_tensor_kind(output, query.new_empty(*query.shape[:-1], value.size(-1)), call=call, what="output")
        want = torch.empty(query.shape[:-1], dtype=logsumexp_dtype(logsumexp, torch.float32), device="meta")
        check_tensor_kind(logsumexp, want, call=call, what="logsumexp")


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call is checked (see call_kata); here once more in float64, under is_causal."""
    case = SPEC.cases.random(rng)[0]
    query, key, value = make_inputs(gen, case, torch.float64)
    kwargs = {"is_causal": True, "scale": relative_scale(rng, case["E"]), "block_size": case["block"]}
    with SPEC.diagnosing(replay(query, key, value, **kwargs), sizes(query, key, value, case["block"])):
        call_kata(kata, query, key, value, **kwargs)

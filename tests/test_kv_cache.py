"""kv_cache: judged against a float64 composition of PyTorch's own pieces.

The reference (`Reference` below) has the kata's four projections as nn.Linear in float64,
every parameter random, rotates q and k with judge.testing.rope.rope (rotate-half, an
independent complex-number formulation) at positions 0..N-1 and attends with
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True): ONE causal pass over the
whole sequence. The kata decodes the same sequence in chunks through its KVCache (a
prefill, then one token at a time, or chunks of random sizes); each chunk's output must
equal the reference's rows for those tokens, which is the bottom-right aligned mask of
the kata text (new token i, at position held + i, sees keys 0..held + i). The cache must
end up holding the reference's rotated keys and its values.

KVCache is also judged on its own: buffers [B, KV, max_len, hs] allocated once and
written in place (their storage never moves), update returning views of that storage,
`length`, overflow refused with ValueError before anything is written, reset.

Every check runs inside SPEC.diagnosing with a replay that runs the same schedule with
another implementation: its own KVCache, its own CachedSelfAttention with the same weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing import checks
from judge.testing import modules_mirrored as modules
from judge.testing.checks import (
    Mismatch,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.rope import rope
from judge.testing.spec import Case, CaseTable, KataSpec, dtypes, edge

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
ASKS = "q_proj, k_proj, v_proj, o_proj (nn.Linear; k_proj and v_proj: embed_dim -> num_kv_heads * head size)"
EXACT = {"rtol": 0.0, "atol": 0.0}

# (rtol, atol) for an output (or the cached keys and values) compared with the float64
# reference rounded to the dtype under test. Measured over 100 seeds x the decoding tests'
# cases (edge cases included in every dtype), the worst |error| / (atol + rtol |expected|)
# of the solution and both variants: float64 0.20 (the variant whose RoPE angles are
# float32 whatever the dtype, which the kata accepts; float64 angles reach 1e-5 of it),
# float32 0.17, float16 0.29, bfloat16 0.26. Every slip in tests/mutants is off by far more.
TOLERANCES = {
    torch.float64: {"rtol": 3e-6, "atol": 3e-6},
    torch.float32: {"rtol": 5e-6, "atol": 5e-6},
    torch.float16: {"rtol": 1e-2, "atol": 1e-2},
    torch.bfloat16: {"rtol": 1e-1, "atol": 1e-1},
}


def assert_close(actual, expected: torch.Tensor, *, call: str, what: str, tolerance: dict) -> None:
    """checks.assert_close, with a quick pass for a result that is plainly close (the tests
    compare a few hundred small tensors; torch.testing's full comparison is slower)."""
    checks.check_tensor_kind(actual, expected, call=call, what=what)
    if not expected.is_meta and torch.allclose(actual, expected, rtol=tolerance["rtol"], atol=tolerance["atol"]):
        return
    checks.assert_close(actual, expected, call=call, what=what, tolerance=tolerance)


# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """B batch, N tokens in all, P prefill, E = H * hs, H heads, KV kv heads, M max_len.

    The head size is even (RoPE); B, P and N differ, and the head size differs from H. The
    first draw groups heads (1 < KV < H: .repeat in place of .repeat_interleave shows), the
    second is multi-query or multi-head; the cache is sometimes filled exactly to max_len."""
    cases = []
    for index in range(count):
        if index == 0:
            H = rng.choice([4, 6])
            KV = rng.choice([d for d in range(2, H) if H % d == 0])
        else:
            H = rng.randint(1, 6)
            divisors = [d for d in range(1, H + 1) if H % d == 0]
            KV = rng.choice([1, H] if index == 1 else divisors)
        hs = rng.choice([n for n in (2, 4, 6, 8) if n != H])
        N = rng.randint(5, 11)
        B, P = rng.sample([n for n in range(1, min(N - 1, 5)) if n != N], 2)
        M = N + rng.choice([0, 1, 3])
        cases.append({"B": B, "N": N, "P": P, "E": H * hs, "H": H, "KV": KV, "M": M})
    return cases


EDGES = (  # the most telling first
    edge("4 heads share 2 kv heads, the cache filled to max_len", B=2, N=7, P=3, E=16, H=4, KV=2, M=7),
    edge("multi-query: 3 heads, one kv head, head size 2", B=3, N=6, P=2, E=6, H=3, KV=1, M=9),
    edge("multi-head: 5 heads, 5 kv heads, one sequence, a one-token prefill", B=1, N=5, P=1, E=30, H=5, KV=5, M=8),
    edge("one head, one token in all", B=1, N=1, P=1, E=4, H=1, KV=1, M=1),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


# --------------------------------------------------------------------------- the reference


class Reference(nn.Module):
    """The kata's attention in float64 from PyTorch's pieces: nn.Linear projections, rope
    (rotate-half) at positions 0..N-1, F.scaled_dot_product_attention(is_causal=True,
    enable_gqa=True) over the whole sequence."""

    def __init__(self, E: int, H: int, KV: int, base: float, bias: bool):
        super().__init__()
        self.H, self.KV, self.hs, self.base = H, KV, E // H, base
        self.q_proj = nn.Linear(E, H * self.hs, bias=bias, dtype=torch.float64)
        self.k_proj = nn.Linear(E, KV * self.hs, bias=bias, dtype=torch.float64)
        self.v_proj = nn.Linear(E, KV * self.hs, bias=bias, dtype=torch.float64)
        self.o_proj = nn.Linear(H * self.hs, E, bias=bias, dtype=torch.float64)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> dict:
        """{"output" [B, N, E], "keys" (rotated) and "values" [B, KV, N, hs]}, float64 on the CPU."""
        x = x.detach().cpu().double()
        B, N, _ = x.shape
        q = self.q_proj(x).view(B, N, self.H, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, N, self.KV, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, N, self.KV, self.hs).transpose(1, 2)
        q, k = rope(q, base=self.base), rope(k, base=self.base)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out = self.o_proj(out.transpose(1, 2).reshape(B, N, self.H * self.hs))
        return {"output": out, "keys": k, "values": v}


@dataclass
class Model:
    """One case built: the float64 reference (every parameter random, rounded to the dtype),
    how the learner's module is built (for messages), and `make(implementation)`: that
    implementation's CachedSelfAttention with the reference's weights, and `cache(...)`: its
    KVCache for the case."""

    reference: Reference
    name: str
    case: Case
    dtype: torch.dtype
    device: str
    make: Callable
    module: nn.Module | None = None  # the learner's, for a call without a cache

    def cache(self, implementation):
        c = self.case
        return implementation.KVCache(c["B"], c["KV"], c["E"] // c["H"], c["M"], dtype=self.dtype, device=self.device)

    def cache_repr(self) -> str:
        c = self.case
        dtype = "" if self.dtype == torch.float32 else f", dtype={self.dtype}"
        device = "" if self.device == "cpu" else f", device={self.device!r}"
        return f"KVCache({c['B']}, {c['KV']}, {c['E'] // c['H']}, max_len={c['M']}{dtype}{device})"


def build(kata, gen, rng, case, dtype=torch.float32, device="cpu", *, bias=None, base=None) -> Model:
    """The learner's constructor call varies: num_kv_heads given or left to its default
    (when KV = H), rope_base given or left at 10000.0, bias on or off."""
    bias = rng.random() < 0.3 if bias is None else bias
    base = rng.choice([10000.0, 500.0, 100.0]) if base is None else base
    E, H, KV = case["E"], case["H"], case["KV"]
    reference = modules.randomise_(Reference(E, H, KV, base, bias), gen, dtype)
    keywords = {} if KV == H and rng.random() < 0.5 else {"num_kv_heads": KV}
    keywords |= {"rope_base": base} if base != 10000.0 else {}
    keywords |= {"bias": True} if bias else {}
    name = modules.module_repr("CachedSelfAttention", embed_dim=E, num_heads=H, **keywords)
    parameters = dict(reference.named_parameters())

    def make(implementation) -> nn.Module:
        module = implementation.CachedSelfAttention(E, H, **keywords).to(dtype)
        modules.load_parameters(module, parameters, what="CachedSelfAttention", asks=ASKS, built=name)
        return module.to(device).eval()

    model = Model(reference, name, case, dtype, device, make)
    with SPEC.diagnosing(lambda implementation: {"module": make(implementation)}, case):
        model.module = make(kata)
    return model


def sequence(gen, case, dtype, device) -> torch.Tensor:
    return randn(gen, case["B"], case["N"], case["E"], dtype=dtype, device=device)


def prefill_then_one_at_a_time(case) -> list[tuple[int, int]]:
    """[(0, P), (P, P + 1), ..., (N - 1, N)]: the chunks (first token, end) of a schedule."""
    P, N = min(case["P"], case["N"]), case["N"]
    return [(0, P)] + [(t, t + 1) for t in range(P, N)]


def random_chunks(rng, case) -> list[tuple[int, int]]:
    """A prefill of P, then chunks of 1 to 4 tokens; the first after the prefill has at least
    2 when they fit (a chunk of several new tokens after held ones: the bottom-right mask)."""
    P, N = min(case["P"], case["N"]), case["N"]
    chunks, start = [(0, P)], P
    while start < N:
        size = rng.randint(2 if start == P else 1, 4)
        end = min(N, start + size)
        chunks.append((start, end))
        start = end
    return chunks


def schedule_text(chunks) -> str:
    return "[" + ", ".join(str(b - a) for a, b in chunks) + "] tokens per call"


# --------------------------------------------------------------------------- decoding with the module


def decode(implementation, model: Model, sequences: list[torch.Tensor], schedules: list[list], module=None):
    """Decode each sequence by its schedule of chunks with `implementation`'s module and one
    KVCache of its own (reset between sequences). Yields (call text, observations) after each
    call, and after each sequence (text, {"rotated keys", "values"}: what the cache holds).
    The same path runs the learner's code and, for the diagnosis, a known slip's."""
    module = model.make(implementation) if module is None else module
    cache = model.cache(implementation)
    meta = model.device == "meta"
    storage = None if meta else (cache.k.untyped_storage().data_ptr(), cache.v.untyped_storage().data_ptr())
    for number, (x, chunks) in enumerate(zip(sequences, schedules)):
        if number:
            cache.reset()
        again = "after cache.reset(), " if number else ""
        story = f"{again}decoding {schedule_text(chunks)} with cache = {model.cache_repr()}"
        for step, (a, b) in enumerate(chunks):
            piece = x[:, a:b].clone()
            call = f"{model.name}({describe(piece)}, cache)"
            text = f"{story}: call {step + 1}, tokens {a}..{b - 1} ({a} held): {call}"
            try:
                output = call_and_check_inputs(lambda piece=piece: module(piece, cache), text, x=piece)
            except ValueError as error:
                raise AssertionError(
                    f"{text} raised ValueError: {error}; but {a} held + {b - a} new = {b} tokens fit in "
                    f"max_len={model.case['M']} (a cache may be filled exactly to max_len)"
                ) from None
            observed = {"output": output, "length": cache.length}
            if not meta:
                now = (cache.k.untyped_storage().data_ptr(), cache.v.untyped_storage().data_ptr())
                observed["buffers kept"] = now == storage
            yield text, observed
        end = chunks[-1][1]
        yield story, {"rotated keys": cache.k[:, :, :end], "values": cache.v[:, :, :end]}


def replay_of(model: Model, sequences, schedules, index: int):
    """The same decoding with another implementation (its own module with the same weights,
    its own KVCache), on copies of the inputs taken now: observation number `index`."""
    copies = [x.clone() for x in sequences]

    def replay(implementation) -> dict:
        for number, (_, observed) in enumerate(decode(implementation, model, copies, schedules)):
            if number == index:
                return observed
        return {}

    return replay


def check_length(length, expected: int, *, after: str, what: str = "length") -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length != expected:
        raise Mismatch(
            f"after {after}, cache.length is {describe(length)}; expected the int {expected} (the tokens held)",
            what=what,
            actual=length,
            expected=expected,
        )


def check_buffers_kept(kept, *, after: str) -> None:
    if kept is False:
        raise Mismatch(
            f"after {after}, cache.k or cache.v is no longer the buffer allocated by KVCache(...): its storage "
            "moved. Allocate the buffers once and write into them in place (self.k[:, :, start:end] = k_new), "
            "never torch.cat into a new tensor",
            what="buffers kept",
            actual=False,
            expected=True,
        )


def check_decoding(kata, model: Model, sequences: list, schedules: list, *, cache_contents: bool = False) -> None:
    """Each call's output against the reference's rows for its tokens (one causal pass over the
    whole sequence), the cache's length after each call, its buffers never moved; with
    cache_contents, the rotated keys and the values the cache holds after each sequence."""
    meta = model.device == "meta"
    wants = [None if meta else model.reference(x) for x in sequences]
    observations = decode(kata, model, sequences, schedules, model.module)
    index = 0
    tolerance = TOLERANCES[model.dtype]
    for want, chunks in zip(wants, schedules):
        for a, b in chunks:
            with SPEC.diagnosing(replay_of(model, sequences, schedules, index), model.case):
                text, got = next(observations)
                if meta:
                    shape = (model.case["B"], b - a, model.case["E"])
                    expected = torch.empty(shape, dtype=model.dtype, device="meta")
                    check_tensor_kind(got["output"], expected, call=text, what="output")
                else:
                    expected = want["output"][:, a:b].to(dtype=model.dtype, device=model.device)
                    call = f"{text}, compared with rows {a}..{b - 1} of one causal pass over the whole sequence,"
                    assert_close(got["output"], expected, call=call, what="output", tolerance=tolerance)
                check_length(got["length"], b, after=text)
                check_buffers_kept(got.get("buffers kept"), after=text)
            index += 1
        with SPEC.diagnosing(replay_of(model, sequences, schedules, index), model.case):
            story, got = next(observations)
            end = chunks[-1][1]
            if cache_contents and not meta:
                for what, key, name in (("rotated keys", "keys", "k"), ("values", "values", "v")):
                    expected = want[key].to(dtype=model.dtype, device=model.device)
                    call = f"after {story}, cache.{name}[:, :, :{end}]"
                    assert_close(got[what], expected, call=call, what=what, tolerance=tolerance)
        index += 1


def full_pass(module, x: torch.Tensor, call: str) -> torch.Tensor:
    return call_and_check_inputs(lambda: module(x), call, x=x)


def full_pass_replay(model: Model, x: torch.Tensor, call: str):
    """The same call without a cache, with another implementation, on a copy of x taken now."""
    original = x.clone()

    def replay(implementation) -> dict:
        return {"output": full_pass(model.make(implementation), original.clone(), call)}

    return replay


# --------------------------------------------------------------------------- KVCache on its own


def cache_sizes(case) -> tuple[int, int, int, int]:
    return case["B"], case["KV"], case["E"] // case["H"], case["M"]


def kv_pieces(gen, case, sizes: list[int], dtype=torch.float32, device="cpu") -> list[tuple]:
    B, KV, hs, _ = cache_sizes(case)
    return [
        (randn(gen, B, KV, T, hs, dtype=dtype, device=device), randn(gen, B, KV, T, hs, dtype=dtype, device=device))
        for T in sizes
    ]


def new_cache(implementation, case, dtype=torch.float32, device="cpu"):
    B, KV, hs, M = cache_sizes(case)
    return implementation.KVCache(B, KV, hs, M, dtype=dtype, device=device)


def cache_text(case, dtype=torch.float32) -> str:
    B, KV, hs, M = cache_sizes(case)
    return f"KVCache({B}, {KV}, {hs}, max_len={M}{'' if dtype == torch.float32 else f', dtype={dtype}'})"


def storage_of(tensor) -> int | None:
    return tensor.untyped_storage().data_ptr() if isinstance(tensor, torch.Tensor) else None


def updates(implementation, case, pieces, dtype=torch.float32):
    """Feed `pieces` to a new KVCache of `implementation`, one update each. Yields (call text,
    {"length", "keys", "values", "views", "buffers kept"}) after each update."""
    cache = new_cache(implementation, case, dtype)
    storage = (storage_of(cache.k), storage_of(cache.v))
    held = 0
    for k_new, v_new in pieces:
        T = k_new.size(2)
        text = f"{cache_text(case, dtype)}.update({describe(k_new)}, {describe(v_new)}) with {held} tokens held"
        try:
            result = call_and_check_inputs(
                lambda k_new=k_new, v_new=v_new: cache.update(k_new, v_new), text, k_new=k_new, v_new=v_new
            )
        except ValueError as error:
            raise AssertionError(
                f"{text} raised ValueError: {error}; but {held} + {T} = {held + T} tokens fit in "
                f"max_len={case['M']} (a cache may be filled exactly to max_len)"
            ) from None
        held += T
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise AssertionError(f"{text} returned {describe(result)}; expected a pair (keys, values)")
        keys, values = result
        yield (
            text,
            {
                "length": cache.length,
                "keys": keys,
                "values": values,
                "views": storage_of(keys) == storage_of(cache.k) and storage_of(values) == storage_of(cache.v),
                "buffers kept": (storage_of(cache.k), storage_of(cache.v)) == storage,
            },
        )


def outcome(fn) -> str:
    """What a call did, as a sentence: "raised ValueError", "raised RuntimeError: ...", or
    "returned normally". The stub's NotImplementedError and the guard's refusals propagate."""
    from judge.forbidden import ForbiddenCallError

    try:
        fn()
    except ValueError:
        return "raised ValueError"
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the message names what was raised instead
        return f"raised {type(error).__name__}: {error}"
    return "returned normally"


def unchanged(before: torch.Tensor, after) -> bool:
    """Bit for bit (NaN included: the buffers' first contents may be anything)."""
    return (
        isinstance(after, torch.Tensor)
        and after.shape == before.shape
        and torch.allclose(after, before, rtol=0.0, atol=0.0, equal_nan=True)
    )


def overflow(implementation, case, fill, too_many, exact, one_more) -> dict:
    """A cache filled by `fill` to max_len - r tokens, then: `too_many` (r + 1 or more tokens,
    refused), `exact` (r tokens: fills it exactly), `one_more` (refused)."""
    cache = new_cache(implementation, case)
    for k_new, v_new in fill:
        cache.update(k_new, v_new)
    seen = {}
    k, v = cache.k.clone(), cache.v.clone()
    seen["too many"] = outcome(lambda: cache.update(*too_many))
    seen["length after refusing"] = cache.length
    seen["nothing written"] = unchanged(k, cache.k) and unchanged(v, cache.v)
    seen["filling exactly"] = outcome(lambda: cache.update(*exact))
    seen["length when full"] = cache.length
    k, v = cache.k.clone(), cache.v.clone()
    seen["one more"] = outcome(lambda: cache.update(*one_more))
    seen["length after refusing one more"] = cache.length
    seen["nothing written to a full cache"] = unchanged(k, cache.k) and unchanged(v, cache.v)
    return seen


def reset_story(implementation, case, before, after) -> dict:
    """Updates, reset(), then one more update: it starts again from position 0."""
    cache = new_cache(implementation, case)
    for k_new, v_new in before:
        cache.update(k_new, v_new)
    cache.reset()
    seen = {"length after reset": cache.length}
    try:
        keys, values = cache.update(*after)
    except ValueError as error:
        return seen | {"update after reset": f"raised ValueError: {error}"}
    seen["update after reset"] = "returned normally"
    seen |= {"keys after reset": keys, "values after reset": values, "length after reset and update": cache.length}
    return seen


def copies(pieces):
    return [tuple(t.clone() for t in piece) for piece in pieces]


def nth(observations, index: int):
    """The observations of step `index` of an iterator of (text, observations)."""
    for number, (_, observed) in enumerate(observations):
        if number == index:
            return observed
    return {}


def split(rng, total: int) -> list[int]:
    """Random sizes of 1 to 3 adding up to `total`."""
    sizes = []
    while total > 0:
        sizes.append(min(total, rng.randint(1, 3)))
        total -= sizes[-1]
    return sizes


def expect(seen: dict, what: str, expected, message: str) -> None:
    if seen[what] != expected:
        raise Mismatch(message.format(got=seen[what]), what=what, actual=seen[what], expected=expected)


# --------------------------------------------------------------------------- the benchmark


def benchmark(kata, device):
    """(kata call, reference call): decoding 256 tokens after a prefill of 16, at batch 1,
    embed_dim 256, 8 heads sharing 2 kv heads. The kata call decodes them one at a time with
    a KVCache; the reference call decodes them with the same module and no cache, recomputing
    the whole prefix at each step (what a cache saves). The ratio is cached / recomputed."""
    B, E, H, KV, P, N = 1, 256, 8, 2, 16, 256
    module = modules.randomise_(kata.CachedSelfAttention(E, H, KV), torch.Generator().manual_seed(0), torch.float32)
    module = module.to(device).eval()
    x = randn(torch.Generator().manual_seed(1), B, P + N, E, device=device)
    cache = kata.KVCache(B, KV, E // H, P + N, device=device)

    def cached():
        cache.reset()
        module(x[:, :P], cache)
        for t in range(P, P + N):
            module(x[:, t : t + 1], cache)

    def recomputed():
        for t in range(P, P + N):
            module(x[:, : t + 1])

    return cached, recomputed


SPEC = KataSpec(
    kata="kv_cache",
    symbol="CachedSelfAttention",
    reference=(
        "a float64 composition: nn.Linear projections, RoPE (judge.testing.rope), "
        "F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) over the whole sequence"
    ),
    forbidden=ATTENTION,
    tolerances=TOLERANCES,
    tolerance_note=(
        "projections, RoPE and a softmax over a decoded sequence; float64 allows RoPE angles computed in float32: "
        "solution and variants measured at most 0.29 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- KVCache


def test_kv_cache_allocates_its_buffers_once_in_the_dtype_and_device_asked(kata, rng):
    """k and v [B, KV, max_len, hs], float32 unless dtype says otherwise; length 0."""
    case = CASES.random(rng)[0]
    B, KV, hs, M = cache_sizes(case)
    for dtype in (None, torch.float64, torch.float16, torch.bfloat16):
        keywords = {} if dtype is None else {"dtype": dtype}
        call = call_repr("KVCache", B, KV, hs, M, **keywords)

        def make(implementation, keywords=keywords) -> dict:
            cache = implementation.KVCache(B, KV, hs, M, **keywords)
            return {f"cache.{name}": getattr(cache, name, None) for name in ("k", "v", "length")}

        with case.judged(), SPEC.diagnosing(make, case):
            got = make(kata)
            for what in ("cache.k", "cache.v"):
                if got[what] is None:
                    raise AssertionError(f"{call} has no attribute `{what[6:]}`; the kata asks for buffers k and v")
                expected = torch.empty(B, KV, M, hs, dtype=dtype or torch.float32)
                check_tensor_kind(got[what], expected, call=call, what=what)
            check_length(got["cache.length"], 0, after=call, what="cache.length")


def test_update_writes_in_place_and_returns_views_of_every_token_held(kata, rng, gen):
    """Updates of random sizes: each returns the keys and values of every token so far,
    oldest first, as views of the buffers; the buffers never move; length counts tokens."""
    for case in CASES.cases(rng):
        with case.judged():
            chunks = random_chunks(rng, case)
            pieces = kv_pieces(gen, case, [b - a for a, b in chunks])
            originals = copies(pieces)
            observations = updates(kata, case, pieces)
            for index in range(len(pieces)):

                def replay(implementation, index=index, case=case, originals=originals) -> dict:
                    return nth(updates(implementation, case, copies(originals)), index)

                held = chunks[index][1]
                with SPEC.diagnosing(replay, case):
                    text, got = next(observations)
                    check_length(got["length"], held, after=text)
                    for what, part in (("keys", 0), ("values", 1)):
                        expected = torch.cat([piece[part] for piece in originals[: index + 1]], dim=2)
                        assert_close(got[what], expected, call=text, what=what, tolerance=EXACT)
                    if not got["views"]:
                        raise Mismatch(
                            f"{text} returned keys or values that do not share the storage of cache.k and cache.v: "
                            "return views of the buffers (self.k[:, :, :length]), not copies",
                            what="views",
                            actual=False,
                            expected=True,
                        )
                    check_buffers_kept(got["buffers kept"], after=text)


def test_update_that_does_not_fit_raises_value_error_before_writing_anything(kata, rng, gen):
    """A cache holding max_len - r tokens refuses r + 1 or more (buffers and length unchanged),
    takes exactly r (full), then refuses one more."""
    for case in CASES.cases(rng):
        with case.judged():
            M = case["M"]
            room = rng.randint(1, M)
            held = M - room
            fill = kv_pieces(gen, case, split(rng, held))
            extra = room + rng.randint(1, 3)
            too_many, exact, one_more = kv_pieces(gen, case, [extra, room, 1])
            tensors = copies([*fill, too_many, exact, one_more])

            def replay(implementation, tensors=tensors, case=case) -> dict:
                mine = copies(tensors)
                return overflow(implementation, case, mine[:-3], *mine[-3:])

            name = cache_text(case)
            with SPEC.diagnosing(replay, case):
                seen = overflow(kata, case, fill, too_many, exact, one_more)
                update = f"{name}.update(k_new, v_new) of {extra} tokens with {held} held"
                expect(
                    seen,
                    "too many",
                    "raised ValueError",
                    f"{update} {{got}}; expected ValueError: {held} + {extra} > max_len={M}",
                )
                expect(
                    seen,
                    "length after refusing",
                    held,
                    f"after {update} was refused, cache.length is {{got!r}}; expected {held}: "
                    "refuse before changing anything",
                )
                expect(
                    seen,
                    "nothing written",
                    True,
                    f"{update} was refused but changed the buffers: check that the tokens fit BEFORE writing "
                    "any of them",
                )
                fill_up = f"{name}.update(k_new, v_new) of {room} tokens with {held} held"
                expect(
                    seen,
                    "filling exactly",
                    "returned normally",
                    f"{fill_up} {{got}}; expected it to work: {held} + {room} = max_len={M} fits exactly",
                )
                expect(seen, "length when full", M, f"after {fill_up}, cache.length is {{got!r}}; expected {M}")
                full = f"{name}.update(k_new, v_new) of 1 token with {M} held (full)"
                expect(seen, "one more", "raised ValueError", f"{full} {{got}}; expected ValueError: the cache is full")
                expect(
                    seen,
                    "length after refusing one more",
                    M,
                    f"after {full} was refused, cache.length is {{got!r}}; expected {M}",
                )
                expect(
                    seen,
                    "nothing written to a full cache",
                    True,
                    f"{full} was refused but changed the buffers: check that the tokens fit BEFORE writing any of them",
                )


def test_reset_forgets_the_held_tokens(kata, rng, gen):
    """After reset() the length is 0 and the next update starts again from position 0."""
    for case in CASES.random(rng, 2):
        with case.judged():
            before = kv_pieces(gen, case, split(rng, rng.randint(1, case["M"])))
            after = kv_pieces(gen, case, [rng.randint(1, case["M"])])[0]
            tensors = copies([*before, after])

            def replay(implementation, tensors=tensors, case=case) -> dict:
                mine = copies(tensors)
                return reset_story(implementation, case, mine[:-1], mine[-1])

            name = cache_text(case)
            with SPEC.diagnosing(replay, case):
                seen = reset_story(kata, case, before, after)
                check_length(seen["length after reset"], 0, after=f"{name}.reset()", what="length after reset")
                call = f"{name}.update({describe(after[0])}, {describe(after[1])}) after reset()"
                expect(
                    seen,
                    "update after reset",
                    "returned normally",
                    f"{call} {{got}}; expected it to work: a reset cache holds no tokens",
                )
                assert_close(
                    seen["keys after reset"], tensors[-1][0], call=call, what="keys after reset", tolerance=EXACT
                )
                assert_close(
                    seen["values after reset"], tensors[-1][1], call=call, what="values after reset", tolerance=EXACT
                )
                check_length(
                    seen["length after reset and update"],
                    after[0].size(2),
                    after=call,
                    what="length after reset and update",
                )


# --------------------------------------------------------------------------- CachedSelfAttention


@dtypes(*FULL)
def test_a_full_pass_without_a_cache_is_causal_grouped_query_attention_with_rope(kata, rng, gen, dtype, device):
    """cache=None: positions 0..T-1, query i sees keys 0..i."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype, device)
            x = sequence(gen, case, dtype, device)
            want = model.reference(x)["output"].to(dtype=dtype, device=device)
            call = call_repr(model.name, x)
            with SPEC.diagnosing(full_pass_replay(model, x, call), case):
                got = full_pass(model.module, x, call)
                assert_close(got, want, call=call, what="output", tolerance=TOLERANCES[dtype])


@dtypes(*FULL)
def test_prefill_then_one_token_at_a_time_matches_one_full_pass(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype, device)
            check_decoding(kata, model, [sequence(gen, case, dtype, device)], [prefill_then_one_at_a_time(case)])


@dtypes(*FULL)
def test_chunks_of_random_sizes_match_one_full_pass(kata, rng, gen, dtype, device):
    """Several new tokens after held ones: new token i sees every held token and the new
    ones up to itself (a bottom-right aligned causal mask)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype, device)
            check_decoding(kata, model, [sequence(gen, case, dtype, device)], [random_chunks(rng, case)])


def test_the_cache_holds_keys_rotated_at_their_positions_and_the_values(kata, rng, gen):
    for case in CASES.cases(rng):
        with case.judged():
            model = build(kata, gen, rng, case)
            x = sequence(gen, case, torch.float32, "cpu")
            check_decoding(kata, model, [x], [random_chunks(rng, case)], cache_contents=True)


def test_after_reset_the_cache_decodes_a_new_sequence_from_position_zero(kata, rng, gen):
    for case in CASES.random(rng, 2):
        with case.judged():
            model = build(kata, gen, rng, case)
            sequences = [sequence(gen, case, torch.float32, "cpu") for _ in range(2)]
            schedules = [random_chunks(rng, case), prefill_then_one_at_a_time(case)]
            check_decoding(kata, model, sequences, schedules, cache_contents=True)


@dtypes(*HALF)
def test_decodes_in_half_precision(kata, rng, gen, dtype):
    """A blocked score must become -inf (or the dtype's lowest): -1e9 does not fit in float16."""
    for case in CASES.random(rng, 2):
        with case.judged():
            model = build(kata, gen, rng, case, dtype)
            x = sequence(gen, case, dtype, "cpu")
            check_decoding(kata, model, [x], [random_chunks(rng, case)], cache_contents=True)


def test_sizes_that_do_not_split_raise_value_error(kata, rng):
    """embed_dim not divisible by num_heads, num_heads not divisible by num_kv_heads, an odd head size."""
    H = rng.choice([4, 6])
    hs = rng.choice([2, 4, 6])
    attempts = [
        ((H * hs + rng.randint(1, H - 1), H, H // 2), f"embed_dim is not divisible by num_heads={H}"),
        ((H * hs, H, rng.choice([n for n in range(2, H) if H % n])), f"num_heads={H} is not divisible by num_kv_heads"),
        ((H * rng.choice([3, 5]), H, 2), "the head size is odd: RoPE rotates pairs of coordinates"),
    ]
    for arguments, reason in attempts:
        call = call_repr("CachedSelfAttention", *arguments)

        def attempt(implementation, arguments=arguments, call=call, reason=reason):
            assert_raises_value_error(lambda: implementation.CachedSelfAttention(*arguments), call=call, reason=reason)
            return {}

        with SPEC.diagnosing(attempt, {"E": arguments[0], "H": arguments[1], "KV": arguments[2]}):
            attempt(kata)


def test_has_the_four_projections_with_a_bias_only_when_asked(kata, rng, gen):
    """q_proj, k_proj, v_proj, o_proj, nn.Linear layout; k and v project to the kv heads only."""
    case = CASES.random(rng)[0]
    for bias in (False, True):
        with case.judged():
            build(kata, gen, rng, case, bias=bias)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """The causal mask and the RoPE angles made inside forward must be made on x's device;
    the cache's buffers on the device it is asked for."""
    case = CASES.random(rng)[0]
    with case.judged():
        B, KV, hs, M = cache_sizes(case)
        call = call_repr("KVCache", B, KV, hs, M, device=other_device)

        def make(implementation) -> dict:
            cache = implementation.KVCache(B, KV, hs, M, device=other_device)
            return {"cache.k": cache.k, "cache.v": cache.v}

        with SPEC.diagnosing(make, case):
            got = make(kata)
            for what in ("cache.k", "cache.v"):
                expected = torch.empty(B, KV, M, hs, device="meta")
                if other_device != "meta":
                    expected = torch.empty(B, KV, M, hs, device=other_device)
                check_tensor_kind(got[what], expected, call=call, what=what)
        model = build(kata, gen, rng, case, device=other_device)
        x = sequence(gen, case, torch.float32, other_device)
        call_on_device(lambda: check_decoding(kata, model, [x], [random_chunks(rng, case)]), other_device)


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call checks its x (and every update its k_new and v_new); here once more, alone."""
    case = CASES.random(rng)[1]
    with case.judged():
        model = build(kata, gen, rng, case)
        x = sequence(gen, case, torch.float32, "cpu")
        for _ in decode(kata, model, [x], [random_chunks(rng, case)], model.module):
            pass

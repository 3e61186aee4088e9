"""kv_cache: what its tests share: the SPEC, the case table, the reference, and how a case
is built; the stories (scenarios) and their checks are in stories.py.

The reference (`Reference` below) has the kata's four projections as nn.Linear in float64,
every parameter random, rotates q and k with judge.testing.rope.rope (rotate-half, an
independent complex-number formulation) at positions 0..N-1 and attends with
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True): ONE causal pass over the
whole sequence. The kata decodes the same sequence in chunks through its KVCache (a
prefill, then one token at a time, or chunks of random sizes); each chunk's output must
equal the reference's rows for those tokens, which is the bottom-right aligned mask of
the kata text (new token i, at position held + i, sees keys 0..held + i). The cache must
hold the reference's rotated keys and its values after every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import checks, modules
from judge.testing.inputs import randn
from judge.testing.modules import ModuleKata
from judge.testing.rope import rope
from judge.testing.spec import Case, CaseTable, KataSpec, edge
from judge.testing.tolerances import per_dtype

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
ASKS = pick(
    "q_proj, k_proj, v_proj, o_proj (nn.Linear; k_proj and v_proj: embed_dim -> num_kv_heads * head size)",
    "q_proj、k_proj、v_proj、o_proj（nn.Linear；k_proj 和 v_proj：embed_dim -> num_kv_heads * 头大小）",
)
EXACT = {"rtol": 0.0, "atol": 0.0}

# (rtol, atol) for an output (or the cached keys and values) compared with the float64
# reference rounded to the dtype under test. Measured over 100 seeds x the decoding tests'
# cases (edge cases included in every dtype), the worst |error| / (atol + rtol |expected|)
# of the solution and the variants: float32 0.17, float16 0.29, bfloat16 0.26; float64,
# computed in float64 throughout, 1.1e-5 of its tolerance (about 1e-15 off). The float64 rule:
# in the core tier float64 results are judged with float32's tolerance, so RoPE angles
# computed in float32 (Hugging Face's inv_freq) or a softmax taken in float32 are right
# there; float64's own tolerance judges them in the one test of that convention, far below
# what a float32 step gives (float32 angles are off by up to 5e-7). Every slip in
# tests/mutants is off by far more.
TOLERANCES = per_dtype(float64=(1e-10, 1e-10), float32=(5e-6, 5e-6), float16=(1e-2, 1e-2), bfloat16=(1e-1, 1e-1))


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


# fmt: off
EDGES = (  # the most telling first
    edge("4 heads share 2 kv heads, the cache filled to max_len", "4 个头共享 2 个 kv 头，缓存恰好填满到 max_len",
         B=2, N=7, P=3, E=16, H=4, KV=2, M=7),
    edge("multi-query: 3 heads, one kv head, head size 2", "多查询：3 个头、1 个 kv 头，头大小为 2",
         B=3, N=6, P=2, E=6, H=3, KV=1, M=9),
    edge("multi-head: 5 heads, 5 kv heads, one sequence, a one-token prefill",
         "多头：5 个头、5 个 kv 头，一个序列，预填充 1 个 token",
         B=1, N=5, P=1, E=30, H=5, KV=5, M=8),
    edge("one head, one token in all", "一个头，总共只有一个 token",
         B=1, N=1, P=1, E=4, H=1, KV=1, M=1),
)
# fmt: on
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


def reference_forward(reference, inputs, kwargs):
    """A call without a cache: one causal pass, every row defined."""
    return {"output": reference(inputs["x"])["output"]}, None


KVC = ModuleKata(
    kata="kv_cache",
    cls="CachedSelfAttention",
    asks=ASKS,
    inputs=("x",),
    reference=lambda case, options: Reference(
        case["E"], case["H"], case["KV"], options.get("rope_base", 10000.0), options.get("bias", False)
    ),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=lambda case, options: ({"embed_dim": case["E"], "num_heads": case["H"]}, dict(options)),
    forward=reference_forward,
    tolerances=TOLERANCES,
    nan_hint=pick(
        "NaN usually comes from a softmax over a row of -inf, a token whose every key was blocked: the causal mask "
        "blocks only the keys after a token (new token i, at position held + i, sees keys 0..held + i, itself "
        "included)",
        "NaN 通常来自对一整行 -inf 做 softmax，即某个 token 的所有键都被屏蔽了：因果掩码只屏蔽该 token 之后的键"
        "（新 token i 位于位置 held + i，能看到键 0..held + i，包括它自己）",
    ),
)


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
        "projections, RoPE and a softmax over a decoded sequence; float64 results are judged with float32's "
        "tolerance in the core tier (RoPE angles in float32 accepted there), with float64's in its convention: "
        "solution and variants measured at most 0.29 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- sizes and inputs


def cache_sizes(case) -> tuple[int, int, int, int]:
    """KVCache's positional arguments for a case: (B, KV, hs, max_len)."""
    return case["B"], case["KV"], case["E"] // case["H"], case["M"]


def cache_text(case, dtype=torch.float32, device="cpu") -> str:
    B, KV, hs, M = cache_sizes(case)
    dtype = "" if dtype == torch.float32 else f", dtype={dtype}"
    device = "" if str(device) == "cpu" else f", device={str(device)!r}"
    return f"KVCache({B}, {KV}, {hs}, max_len={M}{dtype}{device})"


def sequence(gen, case, dtype, device="cpu") -> torch.Tensor:
    return randn(gen, case["B"], case["N"], case["E"], dtype=dtype, device=device)


def kv_pieces(gen, case, sizes: list[int], dtype=torch.float32) -> list[tuple]:
    B, KV, hs, _ = cache_sizes(case)
    return [(randn(gen, B, KV, T, hs, dtype=dtype), randn(gen, B, KV, T, hs, dtype=dtype)) for T in sizes]


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


def split(rng, total: int) -> list[int]:
    """Random sizes of 1 to 3 adding up to `total`."""
    sizes = []
    while total > 0:
        sizes.append(min(total, rng.randint(1, 3)))
        total -= sizes[-1]
    return sizes


def schedule_text(chunks) -> str:
    sizes = "[" + ", ".join(str(b - a) for a, b in chunks) + "]"
    return pick(f"{sizes} tokens per call", f"每次调用的 token 数为 {sizes}")


# --------------------------------------------------------------------------- a case built


@dataclass
class Model:
    """One case built: the learner's module's recipe and its float64 reference (every
    parameter random, rounded to the dtype), the case, and the KVCache every story uses."""

    built: modules.Built
    case: Case
    dtype: torch.dtype
    device: str

    @property
    def name(self) -> str:
        return self.built.name

    @property
    def cache_keywords(self) -> dict:
        keywords = {} if self.dtype == torch.float32 else {"dtype": self.dtype}
        return keywords | ({} if self.device == "cpu" else {"device": self.device})

    def cache_repr(self) -> str:
        return cache_text(self.case, self.dtype, self.device)


def build(gen, rng, case, dtype=torch.float32, device="cpu", *, bias=None, base=None) -> Model:
    """The learner's constructor call varies: num_kv_heads given or left to its default
    (when KV = H), rope_base given or left at 10000.0, bias on or off."""
    bias = rng.random() < 0.3 if bias is None else bias
    base = rng.choice([10000.0, 500.0, 100.0]) if base is None else base
    options = {} if case["KV"] == case["H"] and rng.random() < 0.5 else {"num_kv_heads": case["KV"]}
    options |= {"rope_base": base} if base != 10000.0 else {}
    options |= {"bias": True} if bias else {}
    return Model(modules.build(KVC, gen, case, options, dtype, device), case, dtype, str(device))

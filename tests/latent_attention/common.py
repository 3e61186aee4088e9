"""latent_attention: what its tests share: the SPEC, the case table, the float64 reference, the
decoding story (one scenario) and its checks.

The reference (`Reference` below) is written here, independently of the solution: the kata's
submodules as nn.Linear and nn.RMSNorm in float64, every parameter random (norm weights
included, so a skipped kv_a_layernorm shows), RoPE from judge.testing.rope (rotation as
complex multiplication, half-split layout) on q's rope part and on the shared rope key at
positions 0..N-1, and F.scaled_dot_product_attention(is_causal=True, scale=(n + p) ** -0.5)
over the whole sequence: ONE causal pass. Its cache is the normalized latent and the rotated
rope key of every token. The kata plays a story (a full pass, then the same sequence decoded
from an empty cache in chunks, each call given the cache the previous one returned); the
full pass must equal the reference, each chunk's output the reference's rows for its tokens
(the bottom-right aligned mask), and the cache after each call the reference's first tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from judge.language import pick, tr
from judge.testing import checks, modules
from judge.testing.checks import describe
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.modules import ModuleKata
from judge.testing.rope import rope
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge
from judge.testing.tolerances import per_dtype

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]

# (rtol, atol) for the output and the cache compared with the float64 reference rounded to
# the dtype under test. Measured over 100 seeds x every case of the decoding tests (edge
# cases included for float32/float64, two draws in half precision), the solution and both
# variants, the worst |error| / (atol + rtol |expected|): float32 0.11, float16 0.17,
# bfloat16 0.14. The core tier judges float64 results with float32's tolerance (the float64
# rule). The float64 convention adds 6e-7 * (1 + the largest position) to float64's atol, as
# the contract allows RoPE angles accurate to float32 (Hugging Face's inv_freq): computed in
# float64 throughout, the solution and the absorbed variant reach 1.5e-9 of it; the Hugging
# Face variant (float32 inv_freq, softmax and RMSNorm statistics) 0.49 of it.
TOLERANCES = per_dtype(float64=(1e-10, 1e-10), float32=(1e-5, 1e-5), float16=(2e-2, 2e-2), bfloat16=(1.5e-1, 1.5e-1))
ANGLES_IN_FLOAT32 = 6e-7  # per position, see above

ASKS = pick(
    "q_proj (or q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj "
    "(nn.Linear with bias=False, nn.RMSNorm)",
    "q_proj（或 q_a_proj、q_a_layernorm、q_b_proj）、kv_a_proj_with_mqa、kv_a_layernorm、kv_b_proj、o_proj"
    "（bias=False 的 nn.Linear，nn.RMSNorm）",
)


# --------------------------------------------------------------------------- the case table


def schedule(rng, N: int) -> tuple[int, ...]:
    """Chunk sizes adding up to N: a prefill of 1..N-1 tokens (all N when N is 1), then 1 to 3 at a time."""
    sizes = [rng.randint(1, N - 1) if N > 1 else 1]
    while sum(sizes) < N:
        sizes.append(min(N - sum(sizes), rng.randint(1, 3)))
    return tuple(sizes)


def hidden_sizes(rng, count: int) -> list[dict]:
    """B batch, N tokens, D d_model, H heads, r kv_lora_rank, n nope, p rope, dv v_head_dim,
    q q_lora_rank (0: None), chunks the decoding schedule. dv differs from n and from n + p
    (a scale from the wrong size shows); the first draw compresses the queries, the second
    does not."""
    cases = []
    for index in range(count):
        n, p = rng.choice([2, 4, 6]), rng.choice([2, 4])
        dv = rng.choice([v for v in (2, 3, 4, 5, 6, 8) if v not in (n, n + p)])
        q = 0 if index == 1 else rng.choice([4, 6, 8]) if index == 0 else rng.choice([0, 4, 6, 8])
        N = rng.randint(3, 9)
        cases.append(
            {"B": rng.randint(1, 3), "N": N, "D": rng.choice([16, 20, 24, 32]), "H": rng.randint(1, 4),
             "r": rng.choice([4, 6, 8]), "n": n, "p": p, "dv": dv, "q": q, "chunks": schedule(rng, N)}
        )  # fmt: skip
    return cases


# fmt: off
EDGES = (  # the most telling first: v_head_dim, nope and rope all differ; a chunked prefill
    edge("v_head_dim differs from nope + rope, compressed queries, chunked prefill 3 + 1 + 4",
         "v_head_dim 不等于 nope + rope，压缩查询，分块预填充 3 + 1 + 4",
         B=2, N=8, D=16, H=2, r=6, n=4, p=2, dv=3, q=8, chunks=(3, 1, 4)),
    edge("no query compression (q_lora_rank None), one token at a time",
         "不压缩查询（q_lora_rank 为 None），每次一个 token",
         B=1, N=5, D=24, H=3, r=4, n=2, p=4, dv=5, q=0, chunks=(1, 1, 1, 1, 1)),
    edge("single head, chunked prefill 2 + 3 + 1", "单个头，分块预填充 2 + 3 + 1",
         B=3, N=6, D=20, H=1, r=8, n=6, p=2, dv=4, q=6, chunks=(2, 3, 1)),
    edge("one token in all", "总共只有一个 token",
         B=2, N=1, D=16, H=4, r=4, n=2, p=2, dv=3, q=0, chunks=(1,)),
)
# fmt: on
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=2)


# --------------------------------------------------------------------------- the reference


class Reference(nn.Module):
    """MLA in float64 from PyTorch's pieces (see the module docstring), the kata's names."""

    def __init__(self, case, theta: float = 10000.0, eps: float = 1e-6):
        super().__init__()
        D, H, r, n, p, dv, q = (case[k] for k in ("D", "H", "r", "n", "p", "dv", "q"))
        self.H, self.r, self.n, self.p, self.dv, self.q, self.theta = H, r, n, p, dv, q, theta
        kw = {"bias": False, "dtype": torch.float64}
        if q:
            self.q_a_proj = nn.Linear(D, q, **kw)
            self.q_a_layernorm = nn.RMSNorm(q, eps=eps, dtype=torch.float64)
            self.q_b_proj = nn.Linear(q, H * (n + p), **kw)
        else:
            self.q_proj = nn.Linear(D, H * (n + p), **kw)
        self.kv_a_proj_with_mqa = nn.Linear(D, r + p, **kw)
        self.kv_a_layernorm = nn.RMSNorm(r, eps=eps, dtype=torch.float64)
        self.kv_b_proj = nn.Linear(r, H * (n + dv), **kw)
        self.o_proj = nn.Linear(H * dv, D, **kw)

    def forward(self, x: torch.Tensor) -> dict:
        """{"output" [B, N, D], "latent cache" [B, N, r], "rope key cache" [B, N, p]}, float64 on the CPU.
        Autograd stays on (the gradient test differentiates through it)."""
        B, N, _ = x.shape
        H, n, p, dv = self.H, self.n, self.p, self.dv
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.q else self.q_proj(x)
        q_nope, q_pe = q.unflatten(-1, (H, n + p)).transpose(1, 2).split([n, p], dim=-1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([self.r, p], dim=-1)
        c = self.kv_a_layernorm(latent)
        q_pe, k_pe = rope_grad(q_pe, self.theta), rope_grad(k_pe, self.theta)
        k_nope, v = self.kv_b_proj(c).unflatten(-1, (H, n + dv)).transpose(1, 2).split([n, dv], dim=-1)
        k = torch.cat([k_nope, k_pe[:, None].expand(B, H, N, p)], dim=-1)
        out = F.scaled_dot_product_attention(
            torch.cat([q_nope, q_pe], dim=-1), k, v, is_causal=True, scale=(n + p) ** -0.5
        )
        output = self.o_proj(out.transpose(1, 2).reshape(B, N, H * dv))
        return {"output": output, "latent cache": c, "rope key cache": k_pe}


def rope_grad(x: torch.Tensor, theta: float) -> torch.Tensor:
    """judge.testing.rope's rotation (half-split, positions 0..T-1) as a linear map autograd
    follows: rope() of the basis vectors gives each position's rotation matrix."""
    T, D = x.shape[-2], x.shape[-1]
    eye = torch.eye(D, dtype=torch.float64)
    rotations = rope(eye[:, None, :].expand(D, T, D), base=theta)  # (D in, T, D out)
    return torch.einsum("...td,dte->...te", x, rotations)


def reference_forward(reference, inputs, kwargs):
    with torch.no_grad():
        return {"output": reference(inputs["x"])["output"]}, None


def arguments(case, options):
    """d_model and num_heads positional; the sizes by keyword; q_lora_rank, rope_theta and eps
    only when they differ from their defaults."""
    keywords = {"kv_lora_rank": case["r"], "qk_nope_head_dim": case["n"], "qk_rope_head_dim": case["p"]}
    keywords["v_head_dim"] = case["dv"]
    keywords |= {"q_lora_rank": case["q"]} if case["q"] else {}
    keywords |= {k: v for k, v in options.items() if v != {"rope_theta": 10000.0, "eps": 1e-6}[k]}
    return {"d_model": case["D"], "num_heads": case["H"]}, keywords


MLA = ModuleKata(
    kata="latent_attention",
    cls="MultiHeadLatentAttention",
    asks=ASKS,
    inputs=("x",),
    reference=lambda case, options: Reference(case, options.get("rope_theta", 10000.0), options.get("eps", 1e-6)),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=arguments,
    forward=reference_forward,
    outputs=lambda result, call, kwargs: {"output": result[0] if isinstance(result, (tuple, list)) else result},
    output=0,
    tolerances=TOLERANCES,
    nan_hint=pick(
        "NaN usually comes from a softmax over a row of -inf, a token whose every key was blocked: new token i, at "
        "position S0 + i, sees keys 0..S0 + i, itself included",
        "NaN 通常来自对一整行 -inf 做 softmax，即某个 token 的所有键都被屏蔽了：新 token i 位于位置 S0 + i，"
        "能看到键 0..S0 + i，包括它自己",
    ),
)


# --------------------------------------------------------------------------- the benchmark


def benchmark(kata, device):
    """(kata call, reference call, kata notes, reference notes): decoding 128 tokens one at a
    time after a prefill of 16, batch 1, d_model 256, 8 heads, kv_lora_rank 64, nope 32, rope
    16, v 32, q_lora_rank 96, float32. The reference is a naive multi-head attention of the same
    head sizes whose cache holds every head's full keys and values (torch.cat per step). The
    notes give each side's cache per token: r + p numbers against H * (n + p + dv)."""
    B, D, H, r, n, p, dv, q, P, N = 1, 256, 8, 64, 32, 16, 32, 96, 16, 128
    case = {"D": D, "H": H, "r": r, "n": n, "p": p, "dv": dv, "q": q}
    module = kata.MultiHeadLatentAttention(
        D, H, kv_lora_rank=r, qk_nope_head_dim=n, qk_rope_head_dim=p, v_head_dim=dv, q_lora_rank=q
    )
    module = modules.randomise_(module, torch.Generator().manual_seed(0), torch.float32).float().to(device).eval()
    naive = NaiveCachedAttention(case).to(device).eval()
    x = randn(torch.Generator().manual_seed(1), B, P + N, D, device=device)
    held = {}

    @torch.no_grad()
    def latent():
        _, cache = module(x[:, :P])
        for t in range(P, P + N):
            _, cache = module(x[:, t : t + 1], cache)
        held["cache"] = cache

    @torch.no_grad()
    def full():
        _, cache = naive(x[:, :P])
        for t in range(P, P + N):
            _, cache = naive(x[:, t : t + 1], cache)

    def kata_notes() -> dict:
        latent()
        c, k_pe = held["cache"]
        per_token = c.size(-1) + k_pe.size(-1)
        size = (c.numel() * c.element_size() + k_pe.numel() * k_pe.element_size()) / 1e3
        return {"cache": f"{per_token} numbers per token ({size:.4g} kB for {P + N} tokens)"}

    def reference_notes() -> dict:
        per_token = H * (n + p + dv)
        size = B * (P + N) * per_token * 4 / 1e3
        return {"naive MHA cache": f"{per_token} numbers per token ({size:.4g} kB)"}

    return latent, full, kata_notes, reference_notes


class NaiveCachedAttention(nn.Module):
    """The benchmark's baseline, float32: per-head q, k, v projections of MLA's head sizes,
    RoPE on the rope part, a cache of every head's keys and values, explicit causal attention."""

    def __init__(self, case):
        super().__init__()
        D, H, n, p, dv = (case[k] for k in ("D", "H", "n", "p", "dv"))
        self.H, self.n, self.p, self.dv = H, n, p, dv
        self.q_proj = nn.Linear(D, H * (n + p), bias=False)
        self.k_proj = nn.Linear(D, H * (n + p), bias=False)
        self.v_proj = nn.Linear(D, H * dv, bias=False)
        self.o_proj = nn.Linear(H * dv, D, bias=False)
        self.inv_freq = 10000.0 ** (-torch.arange(0, p, 2) / p)

    def forward(self, x, cache=None):
        B, L, _ = x.shape
        H, n, p, dv = self.H, self.n, self.p, self.dv
        start = 0 if cache is None else cache[0].size(2)
        q = self.q_proj(x).view(B, L, H, n + p).transpose(1, 2)
        k = self.k_proj(x).view(B, L, H, n + p).transpose(1, 2)
        v = self.v_proj(x).view(B, L, H, dv).transpose(1, 2)
        angles = torch.arange(start, start + L, device=x.device)[:, None] * self.inv_freq.to(x.device)
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

        def rotate(t):
            a, b = t[..., n:].chunk(2, dim=-1)
            return torch.cat([t[..., :n], t[..., n:] * cos + torch.cat([-b, a], -1) * sin], dim=-1)

        q, k = rotate(q), rotate(k)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        S = k.size(2)
        scores = (q @ k.transpose(-2, -1)) * (n + p) ** -0.5
        future = torch.ones(L, S, dtype=torch.bool, device=x.device).triu(S - L + 1)
        out = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, L, H * dv)), (k, v)


SPEC = KataSpec(
    kata="latent_attention",
    symbol="MultiHeadLatentAttention",
    reference=(
        "a float64 composition from the same weights: nn.Linear, nn.RMSNorm, RoPE (judge.testing.rope, half-split) "
        "on the rope parts, F.scaled_dot_product_attention(is_causal=True) over the whole sequence; the cache is "
        "the normalized latent and the rotated rope key"
    ),
    tolerances=TOLERANCES,
    tolerance_note=(
        "projections, two RMSNorms, RoPE and a softmax over a sequence decoded in chunks, the cache included; float64 "
        "results judged with float32's tolerance in the core tier and with float64's plus 6e-7 per position (RoPE "
        "angles in float32) in its convention: solution and variants measured at most 0.17 of these over 100 seeds "
        "(Hugging Face's float32 steps 0.49 of the float64 one)"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- building a case


def build(gen, rng, case, dtype=torch.float32, device="cpu", *, theta=None, eps=None) -> modules.Built:
    """The learner's module with random weights; rope_theta and eps drawn (default or not)."""
    theta = rng.choice([10000.0, 500.0, 50.0]) if theta is None else theta
    eps = rng.choice([1e-6, 1e-6, 1e-2]) if eps is None else eps
    return modules.build(MLA, gen, case, {"rope_theta": theta, "eps": eps}, dtype, device)


def sequence(gen, case, dtype=torch.float32, device="cpu") -> torch.Tensor:
    return randn(gen, case["B"], case["N"], case["D"], dtype=dtype, device=device)


def spans(chunks) -> list[tuple[int, int]]:
    """Chunk sizes as (first token, end) pairs."""
    out, start = [], 0
    for size in chunks:
        out.append((start, start + size))
        start += size
    return out


# --------------------------------------------------------------------------- the story (runs where the kata lives)


def _answer(result) -> dict:
    """A forward's result as data: {"output", "latent cache", "rope key cache"}, or {"returned": what it was}."""
    if (
        isinstance(result, (tuple, list))
        and len(result) == 2
        and isinstance(result[1], (tuple, list))
        and len(result[1]) == 2
    ):
        return {"output": result[0], "latent cache": result[1][0], "rope key cache": result[1][1]}
    return {"returned": repr(type(result).__name__)}


@scenario
def story(kata, recipe: dict, x, chunks: list, empty: tuple | None, upstream=None) -> dict:
    """The learner's module (built from the recipe): one call on the whole of x (no cache),
    then x decoded by `chunks` ((first token, end) pairs), the first call given `empty`
    (None, or a cache of length 0) and each next one the cache the previous call returned.
    The trace: each call's answer, the chunk as the call left it, and the cache it was given
    before and after the call. With `upstream`: the gradient of x through the full pass."""
    module, problem = modules.made(kata, recipe)
    if problem:
        return problem
    trace = {"full": _answer(module(x.clone())), "calls": []}
    cache = empty
    for a, b in chunks:
        piece = x[:, a:b].clone()
        given = None if cache is None else tuple(t.detach().clone() for t in cache)
        got = _answer(module(piece, cache))
        got |= {"x": piece, "cache given": given, "cache after": None if cache is None else tuple(cache)}
        trace["calls"].append(got)
        if "returned" in got:
            break
        cache = (got["latent cache"], got["rope key cache"])
    if upstream is not None:
        leaf = x.clone().requires_grad_()
        output = module(leaf)[0]
        if isinstance(output, torch.Tensor) and output.requires_grad:
            (output * upstream).sum().backward()
        trace["gradient"] = leaf.grad
    return trace


# --------------------------------------------------------------------------- the judging process's side


class Story:
    """One case's story: the built module, the sequence, the schedule and the reference's pass."""

    def __init__(self, built: modules.Built, x: torch.Tensor, chunks, *, empty_first: bool = False):
        self.built, self.x, self.spans = built, x, spans(chunks)
        self.empty_first = empty_first
        self._want = None

    @property
    def want(self) -> dict:
        """The reference's pass over the whole sequence (computed when first asked: never on "meta")."""
        if self._want is None:
            with torch.no_grad():
                self._want = self.built.reference(self.x.detach().cpu().double())
        return self._want

    @property
    def empty(self):
        if not self.empty_first:
            return None
        B, r, p = self.x.size(0), self.built.case["r"], self.built.case["p"]
        return (self.x.new_zeros(B, 0, r), self.x.new_zeros(B, 0, p))

    def run(self, implementation, upstream=None) -> dict:
        got = story(implementation, self.built.recipe, self.x, self.spans, self.empty, upstream)
        return modules.built_module(MLA, self.built, got)

    def steps(self, trace: dict) -> list[tuple[str, dict, tuple[int, int] | None]]:
        """(call text, answer, (first token, end) or None for the full pass) per call; a call that
        did not return (output, (latent, rope_key)) fails here, for the learner and a replay alike."""
        name = self.built.name
        steps = [(f"{name}({describe(self.x)})", trace["full"], None)]
        cache = pick("an empty cache", "一个空缓存") if self.empty_first else "cache=None"
        for index, ((a, b), got) in enumerate(zip(self.spans, trace["calls"])):
            given = cache if index == 0 else pick("the cache it returned", "上一次返回的缓存")
            text = pick(
                f"decoding {[b_ - a_ for a_, b_ in self.spans]} tokens per call: call {index + 1}, tokens {a}..{b - 1}: "
                f"{name}({describe(self.x[:, a:b])}, {given})",
                f"按每次 {[b_ - a_ for a_, b_ in self.spans]} 个 token 解码：第 {index + 1} 次调用，token {a}..{b - 1}："
                f"{name}({describe(self.x[:, a:b])}, {given})",
            )
            steps.append((text, got, (a, b)))
        for text, got, _ in steps:
            if "returned" in got:
                raise AssertionError(
                    tr(
                        "{call} returned {got}; expected (y, (latent, rope_key)): the output and the new cache",
                        call=text,
                        got=got["returned"],
                    )
                )
        return steps


def judge_story(kata, story_: Story, judge) -> None:
    """The story, one check per call: judge(text, answer, span), each inside a diagnosis that
    replays the same story on each known slip and takes the same call of its trace."""

    def replay(index: int):
        def replayed(implementation) -> dict:
            steps = story_.steps(story_.run(implementation))
            return steps[index][1] if index < len(steps) else {}

        return replayed

    steps = None
    for index in range(1 + len(story_.spans)):
        with diagnosing(SPEC.kata, replay(index), story_.built.case):
            if steps is None:
                steps = story_.steps(story_.run(kata))
            text, got, span = steps[index]
            judge(text, got, span)


CACHE_HINT = pick(
    "the cache holds, per token, the latent after kv_a_layernorm (kv_lora_rank numbers) and the rope key after RoPE "
    "at its own position (qk_rope_head_dim numbers): nothing per head",
    "缓存中每个 token 存的是经过 kv_a_layernorm 的潜在向量（kv_lora_rank 个数）和在其自身位置上旋转过的 rope 键"
    "（qk_rope_head_dim 个数）：没有按头存的东西",
)


def check_story(kata, story_: Story, *, float64_throughout: bool = False, full: bool = True, calls: bool = True):
    """The full pass (output and cache) against the reference and each chunk's output against
    the reference's rows for its tokens and its cache against the reference's first tokens."""
    dtype, device = story_.x.dtype, story_.x.device
    tolerance = dict(TOLERANCES[core_dtype(dtype, float64_throughout)])
    if dtype == torch.float64 and float64_throughout:
        tolerance["atol"] += ANGLES_IN_FLOAT32 * story_.x.size(1)  # positions 0..N-1: 1 + the largest

    def judge(text, got, span) -> None:
        if (span is None and not full) or (span is not None and not calls):
            return
        a, b = span or (0, story_.x.size(1))
        expected = {
            "output": story_.want["output"][:, a:b],
            "latent cache": story_.want["latent cache"][:, :b],
            "rope key cache": story_.want["rope key cache"][:, :b],
        }
        for what, want in expected.items():
            want = want.detach().to(dtype=dtype, device=device)
            hint = "" if what == "output" else CACHE_HINT
            if what == "output" and span is not None:
                call = pick(
                    f"{text}, compared with rows {a}..{b - 1} of one causal pass over the whole sequence,",
                    f"{text}（与对整个序列做一次因果计算所得的第 {a}..{b - 1} 行比较）",
                )
            else:
                call = text
            quick_close(got[what], want, call=call, what=what, tolerance=tolerance, hint=hint)

    judge_story(kata, story_, judge)


def quick_close(actual, expected, *, call: str, what: str, tolerance: dict, hint: str = "") -> None:
    """checks.assert_close, with a quick pass for a result that is plainly close."""
    same_kind = isinstance(actual, torch.Tensor) and (actual.shape, actual.dtype, actual.device) == (
        expected.shape,
        expected.dtype,
        expected.device,
    )
    if same_kind and not expected.is_meta and torch.allclose(actual, expected, rtol=tolerance["rtol"], atol=tolerance["atol"]):
        return
    checks.assert_close(actual, expected, call=call, what=what, tolerance=tolerance, hint=hint)

"""llama_block: judged against the same composition built in float64 from PyTorch's own parts.

The reference is a small nn.Module below whose parameters carry the kata's names, so they
map one to one: nn.RMSNorm (attention_norm, ffn_norm), RoPE as complex multiplication
(judge.testing.rope), F.scaled_dot_product_attention(is_causal=True, enable_gqa=True) and
F.silu. Every parameter is random (the RMSNorm weights 1 + N(0, 0.4^2), gate and up
different), see judge.testing.modules.randomise_. When the block's output is wrong, the
attention and the feed-forward are each run on the very inputs the reference's got (probes),
so the failure says which part differs. The learner's block is built where the kata lives,
from a recipe (judge.testing.modules): its class, arguments and these weights by name.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import Mismatch, check_tensor_kind
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.modules import NON_DEFAULT_EPS, ModuleKata, Probe
from judge.testing.rope import rope
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, Case, CaseTable, KataSpec, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]

# (rtol, atol) per dtype against the float64 reference rounded to that dtype. Measured over
# 100 seeds x 8 cases (the edge cases included; positions default, offset, with gaps and
# unsorted up to ~50, and from 2100 to 3000 in half precision; the defaults on inputs of
# std 1e-3) on the solution and both variants, the worst as a fraction of these:
#   float64 5e-5 (4.6e-15 off, computed in float64 throughout), float32 0.15 (4.1e-6 off),
#   float16 0.23, bfloat16 0.29.
# The float64 rule: in the core tier float64 results are judged with float32's tolerance, so
# RoPE angles computed in float32 (Hugging Face's inv_freq, about position * 1.2e-7 rad off,
# up to 3.3e-6 in the output) or a softmax taken in float32 are right there; float64's own
# tolerance judges them in the one test of that convention, far below what a float32 step
# gives (PyTorch's single-op default 1e-7 lets float32 angles through on some draws).
# Where a slip shows, it is off by 8.9e-4 or more in float32 (the subtlest: norm_eps ignored;
# rope_base ignored 6e-3, every other slip more than 0.04), and angles computed in float16
# by whole radians.
TOLERANCES = per_dtype(float64=(1e-10, 1e-10), float32=(1e-5, 2e-5), float16=(3e-2, 3e-2), bfloat16=(2e-1, 2e-1))
TOLERANCE_NOTE = (
    "float64: float32 RoPE angles are right in the core tier (float32's tolerance), float64 throughout is a "
    "convention; half precision: two RMSNorms, GQA and SwiGLU compound: the solution and variants measured "
    "at most 0.29 of these"
)

ROPE_BASES = (100.0, 1000.0, 500000.0)  # never the default: a rope_base that is ignored shows


def llama_d_ff(d_model: int, multiple_of: int) -> int:
    """Llama's hidden width: 2/3 of 4 * d_model, truncated, then rounded up to multiple_of."""
    return math.ceil(int(8 * d_model / 3) / multiple_of) * multiple_of


# --------------------------------------------------------------------------- the reference


class ReferenceAttention(nn.Module):
    def __init__(self, C: int, H: int, KV: int, base: float):
        super().__init__()
        hs = C // H
        self.H, self.KV, self.hs, self.base = H, KV, hs, base
        self.q_proj = nn.Linear(C, H * hs, bias=False, dtype=torch.float64)
        self.k_proj = nn.Linear(C, KV * hs, bias=False, dtype=torch.float64)
        self.v_proj = nn.Linear(C, KV * hs, bias=False, dtype=torch.float64)
        self.o_proj = nn.Linear(H * hs, C, bias=False, dtype=torch.float64)

    def forward(self, x, positions):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hs).transpose(1, 2)
        q, k = rope(q, positions, base=self.base), rope(k, positions, base=self.base)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.H * self.hs))


class ReferenceFeedForward(nn.Module):
    def __init__(self, C: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(C, d_ff, bias=False, dtype=torch.float64)
        self.up_proj = nn.Linear(C, d_ff, bias=False, dtype=torch.float64)
        self.down_proj = nn.Linear(d_ff, C, bias=False, dtype=torch.float64)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ReferenceBlock(nn.Module):
    def __init__(self, C, H, KV, d_ff, base, eps):
        super().__init__()
        self.attention_norm = nn.RMSNorm(C, eps=eps, dtype=torch.float64)
        self.attention = ReferenceAttention(C, H, KV, base)
        self.ffn_norm = nn.RMSNorm(C, eps=eps, dtype=torch.float64)
        self.feed_forward = ReferenceFeedForward(C, d_ff)

    def forward(self, x, positions=None):
        h = x + self.attention(self.attention_norm(x), positions)
        return h + self.feed_forward(self.ffn_norm(h))


def reference_module(case, options):
    C, H = case["C"], case["H"]
    d_ff = options.get("d_ff")
    if d_ff is None:
        d_ff = llama_d_ff(C, options.get("multiple_of", 256))
    return ReferenceBlock(
        C,
        H,
        options.get("num_kv_heads") or H,
        d_ff,
        options.get("rope_base", 10000.0),
        options.get("norm_eps", 1e-6),
    )


def reference_forward(reference, inputs, kwargs):
    positions = kwargs.get("positions")
    output = reference(inputs["x"], None if positions is None else positions.cpu())
    return {"output": output.detach()}, None  # causal by index: every row has a key


def call_attention_part(attention, args: list, kwargs: dict):
    """The learner's attention called alone, as the kata declares it: (x, positions)."""
    return attention(*args)


def call_feed_forward_part(feed_forward, args: list, kwargs: dict):
    """The learner's feed_forward called alone on its input."""
    return feed_forward(args[0])


BLOCK = ModuleKata(
    kata="llama_block",
    cls="LlamaBlock",
    asks=pick(
        "attention_norm, attention (with q_proj, k_proj, v_proj, o_proj), ffn_norm, "
        "feed_forward (with gate_proj, up_proj, down_proj), no biases",
        "attention_norm、attention（含 q_proj、k_proj、v_proj、o_proj）、ffn_norm、"
        "feed_forward（含 gate_proj、up_proj、down_proj），都不带偏置",
    ),
    inputs=("x",),
    reference=reference_module,
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=lambda case, options: ({"d_model": case["C"], "num_heads": case["H"]}, options),
    forward=reference_forward,
    tolerances=TOLERANCES,
    nan_hint=pick(
        "NaN usually comes from a softmax over a row of -inf, a token whose every key was blocked: the causal mask "
        "blocks only the keys after a token, by index (the token at index i sees indices 0..i, itself included)",
        "NaN 通常来自对整行 -inf 做 softmax，即某个 token 的所有键都被屏蔽了：因果掩码只按下标屏蔽一个 token "
        "之后的键（下标 i 的 token 能看到下标 0..i，包括它自己）",
    ),
    probes=(
        Probe("attention", "attention", call_attention_part),
        Probe("feed_forward", "feed_forward", call_feed_forward_part),
    ),
)

# --------------------------------------------------------------------------- the case table
# B batch, T length, C = d_model, H heads, KV kv heads, F an explicit d_ff, pos the positions
# passed: "default" (none: arange(T)), "offset" (arange(o, o + T)), "gaps" (increasing, not
# contiguous), "unsorted" (distinct, in no order).

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("6 query heads share 2 kv heads, positions from 7", "6 个查询头共享 2 个 kv 头，位置从 7 开始",
         B=2, T=7, C=24, H=6, KV=2, F=37, pos="offset"),
    edge("multi-query: one kv head, positions with gaps", "多查询：一个 kv 头，位置有间隔",
         B=3, T=5, C=12, H=3, KV=1, F=19, pos="gaps"),
    edge("multi-head: as many kv heads as heads", "多头：kv 头与头一样多",
         B=2, T=6, C=10, H=5, KV=5, F=9, pos="default"),
    edge("one position", "一个位置",
         B=2, T=1, C=8, H=2, KV=1, F=11, pos="offset"),
    edge("one sequence, one head", "一个序列，一个头",
         B=1, T=9, C=6, H=1, KV=1, F=13, pos="default"),
)
# fmt: on
KINDS = ("offset", "gaps", "default")


def hidden_sizes(rng, count: int) -> list[dict]:
    """B, T, C and F all differ; the first draw is grouped (1 < KV < H), the others any."""
    cases = []
    for index in range(count):
        if index == 0:
            KV, group = rng.choice([(2, 2), (2, 3), (3, 2)])
            H = KV * group
        else:
            H = rng.randint(1, 6)
            KV = rng.choice([d for d in range(1, H + 1) if H % d == 0])
        C = H * rng.choice([2, 4, 6, 8])
        B, T = rng.sample([n for n in range(2, 12) if n != C], 2)
        F_ = rng.choice([n for n in range(3, 3 * C + 8, 2) if n not in (B, T, C)])
        cases.append({"B": B, "T": T, "C": C, "H": H, "KV": KV, "F": F_, "pos": KINDS[index % len(KINDS)]})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


def make_positions(gen, T: int, kind: str, offset: int | None = None) -> torch.Tensor | None:
    """The positions of a case's tokens, int64 [T], or None for the default."""
    if kind == "default":
        return None
    if kind == "offset":
        start = offset if offset is not None else int(torch.randint(1, 40, (1,), generator=gen))
        return torch.arange(start, start + T)
    if kind == "gaps":
        return torch.randperm(4 * T, generator=gen)[:T].sort().values
    if kind == "unsorted":  # never increasing: positions in index order would hide a mask built from them
        drawn = torch.randperm(3 * T, generator=gen)[:T]
        return drawn.flip(0) if bool((drawn[1:] > drawn[:-1]).all()) else drawn
    raise ValueError(kind)


def shown(positions: torch.Tensor | None) -> str:
    if positions is None:
        return "default"
    values = positions.tolist()
    return str(values) if len(values) <= 12 else f"[{values[0]}, {values[1]}, ..., {values[-1]}]"


def with_positions(case: Case, positions) -> Case:
    sizes = {k: v for k, v in case.sizes.items() if k != "pos"} | {"positions": shown(positions)}
    return Case(case.desc, sizes, case.edge, zh=case.zh)


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, length 128, d_model 512, 8 heads sharing 2 kv
    heads, d_ff 1536 (Llama's rule), in eval() mode. The reference is the same composition as
    PyTorch users write it: nn.RMSNorm, RoPE from float32 angles, F.scaled_dot_product_attention
    (is_causal=True, enable_gqa=True), F.silu."""
    B, T, C, H, KV = 8, 128, 512, 8, 2
    reference = FastReferenceBlock(C, H, KV, llama_d_ff(C, 256)).to(device).eval()
    module = kata.LlamaBlock(C, H, KV)
    modules.load_state(module, dict(reference.named_parameters()))
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)
    return (lambda: module(x)), (lambda: reference(x))


class FastReferenceBlock(nn.Module):
    """The reference for timing: PyTorch's own pieces in the input's dtype and device."""

    def __init__(self, C, H, KV, d_ff, base=10000.0, eps=1e-6):
        super().__init__()
        hs = C // H
        self.H, self.KV, self.hs = H, KV, hs
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, hs, 2).float() / hs), persistent=False)
        self.attention_norm = nn.RMSNorm(C, eps=eps)
        self.ffn_norm = nn.RMSNorm(C, eps=eps)
        self.attention = nn.Module()
        for name, (i, o) in {
            "q_proj": (C, H * hs),
            "k_proj": (C, KV * hs),
            "v_proj": (C, KV * hs),
            "o_proj": (H * hs, C),
        }.items():
            self.attention.add_module(name, nn.Linear(i, o, bias=False))
        self.feed_forward = nn.Module()
        for name, (i, o) in {"gate_proj": (C, d_ff), "up_proj": (C, d_ff), "down_proj": (d_ff, C)}.items():
            self.feed_forward.add_module(name, nn.Linear(i, o, bias=False))

    def rotate(self, x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def forward(self, x):
        B, T, _ = x.shape
        a, f = self.attention, self.feed_forward
        angles = torch.arange(T, device=x.device).float()[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        n = self.attention_norm(x)
        q = a.q_proj(n).view(B, T, self.H, self.hs).transpose(1, 2)
        k = a.k_proj(n).view(B, T, self.KV, self.hs).transpose(1, 2)
        v = a.v_proj(n).view(B, T, self.KV, self.hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            self.rotate(q, cos, sin), self.rotate(k, cos, sin), v, is_causal=True, enable_gqa=True
        )
        h = x + a.o_proj(y.transpose(1, 2).reshape(B, T, -1))
        n = self.ffn_norm(h)
        return h + f.down_proj(F.silu(f.gate_proj(n)) * f.up_proj(n))


SPEC = KataSpec(
    kata="llama_block",
    symbol="LlamaBlock",
    reference=(
        "the same composition in float64: nn.RMSNorm, RoPE as complex multiplication, "
        "F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), F.silu"
    ),
    forbidden=ATTENTION,
    tolerances=TOLERANCES,
    tolerance_note=TOLERANCE_NOTE,
    cases=CASES,
    benchmark=benchmark,
)

# --------------------------------------------------------------------------- helpers


def options_for(rng, case, *, defaults: bool = False) -> dict:
    """Every option passed, none at its default (so one that is ignored shows), unless `defaults`."""
    if defaults:
        return {}
    return {
        "num_kv_heads": case["KV"],
        "d_ff": case["F"],
        "rope_base": rng.choice(ROPE_BASES),
        "norm_eps": rng.choice(NON_DEFAULT_EPS),
    }


def build(gen, rng, case, dtype=torch.float32, device="cpu", *, options=None):
    options = options_for(rng, case) if options is None else options
    return modules.build(BLOCK, gen, case, options, dtype, device)


def inputs(gen, case, dtype=torch.float32, device="cpu", std: float = 1.0) -> dict:
    return {"x": randn(gen, case["B"], case["T"], case["C"], dtype=dtype, device=device, std=std)}


def check(kata, built, x, positions=None, device="cpu", **options):
    kwargs = {} if positions is None else {"positions": positions.to(device)}
    modules.check(BLOCK, kata, built, x, **kwargs, **options)


def run_cases(kata, rng, gen, cases, dtype, device="cpu", *, kind=None, options=None, offset=None, std=1.0, **more):
    for case in cases:
        positions = make_positions(gen, case["T"], kind or case["pos"], offset)
        case = with_positions(case, positions)
        with case.judged():
            built = build(gen, rng, case, dtype, device, options=options)
            check(kata, built, inputs(gen, case, dtype, device, std), positions, device, **more)


@scenario
def feed_forward_widths(kata, C: int, H: int, multiple_of: int) -> dict:
    """LlamaBlock(C, H, 1, multiple_of=multiple_of): the shapes of its feed-forward's weights."""
    block = kata.LlamaBlock(C, H, 1, multiple_of=multiple_of)
    try:
        parts = [block.get_submodule(f"feed_forward.{n}").weight for n in ("gate_proj", "up_proj", "down_proj")]
    except AttributeError as error:
        return {"missing": str(error)}
    return {"d_ff": [tuple(p.shape) for p in parts]}


# --------------------------------------------------------------------------- the math


@core(zh="与用 PyTorch 组件搭建的 Llama 块一致")
@dtypes(*FULL)
def test_matches_the_llama_block_built_from_pytorch_parts(kata, rng, gen, dtype, device):
    """Every option passed (num_kv_heads, d_ff, rope_base, norm_eps), positions default or explicit."""
    run_cases(kata, rng, gen, CASES.cases(rng, edges=dtype == torch.float64), dtype, device)


@core(zh="按给定的 positions 旋转 q 和 k")
@dtypes(*FULL)
def test_rotates_q_and_k_at_the_positions_given(kata, rng, gen, dtype):
    """Explicit positions: an offset arange (the tokens after a prompt) and increasing ones with gaps."""
    for kind in ("offset", "gaps"):
        run_cases(kata, rng, gen, CASES.random(rng, 2), dtype, kind=kind)


@core(zh="因果掩码按下标计算，与 positions 无关")
def test_causal_mask_goes_by_index_whatever_the_positions(kata, rng, gen):
    """Positions in no order: token i still sees tokens 0..i, by index."""
    run_cases(kata, rng, gen, CASES.random(rng, 2), torch.float64, kind="unsorted")


@core(zh="后面的 token 不改变前面的输出")
def test_later_tokens_do_not_change_earlier_outputs(kata, rng, gen):
    """Causality on its own: change x from index t on; the outputs before t must not move."""
    case = CASES.random(rng)[0]
    built = build(gen, rng, case)
    x = inputs(gen, case)
    T = case["T"]
    t = rng.randrange(1, T)
    changed = {"x": x["x"].clone()}
    changed["x"][:, t:] = randn(gen, case["B"], T - t, case["C"])

    def causality(implementation) -> dict:
        call, before = modules.run(BLOCK, implementation, built, x, {})[:2]
        after = modules.run(BLOCK, implementation, built, changed, {})[1]
        check_tensor_kind(before["output"], x["x"], call=call, what="output")
        moved = (before["output"][:, :t] - after["output"][:, :t]).abs().amax(dim=(0, 2))
        moved = moved > TOLERANCES[torch.float32]["atol"]
        if moved.any():
            p = int(moved.nonzero()[0])
            raise AssertionError(
                pick(
                    f"{call}: changing x at indices {t}..{T - 1} only changed the output at index {p} < {t}; "
                    "the token at index i may attend to indices 0..i only (block key j > query i)",
                    f"{call}：只改动了 x 在下标 {t}..{T - 1} 处的值，下标 {p} < {t} 处的输出却变了；"
                    "下标 i 的 token 只能关注下标 0..i（屏蔽键 j > 查询 i）",
                )
            )
        return {}

    with case.judged(), diagnosing(BLOCK.kata, causality, case):
        causality(kata)


@core(zh="d_ff=None 时取 4 * d_model 的 2/3，向上取整到 multiple_of 的倍数")
def test_d_ff_none_is_two_thirds_of_4_d_model_rounded_up_to_multiple_of(kata, rng, gen):
    """d_ff=None with small multiple_of values, so rounding up and rounding down differ."""
    for C, multiple_of in ((10, 8), (12, 5), (6, 4)):  # 26 -> 32, 32 -> 35, 16 -> 16
        case = Case(
            f"Llama's d_ff, rounded up to a multiple of {multiple_of}",
            {"B": 2, "T": 5, "C": C, "H": C // 2, "KV": 1},
            True,
            zh=f"Llama 的 d_ff，向上取整到 {multiple_of} 的倍数",
        )
        want = llama_d_ff(C, multiple_of)
        text = modules.module_repr("LlamaBlock", d_model=C, num_heads=C // 2, num_kv_heads=1, multiple_of=multiple_of)

        def widths(implementation, C=C, multiple_of=multiple_of, text=text) -> dict:
            got = feed_forward_widths(implementation, C, C // 2, multiple_of)
            if "missing" in got:
                raise AssertionError(
                    pick(
                        f"{text}: {got['missing']}; the kata asks for {BLOCK.asks}",
                        f"{text}：{got['missing']}；题目要求 {BLOCK.asks}",
                    )
                )
            return got

        with case.judged(), diagnosing(BLOCK.kata, widths, case):
            got = [tuple(shape) for shape in widths(kata)["d_ff"]]
            expected = [(want, C), (want, C), (C, want)]
            if got != expected:
                raise Mismatch(
                    pick(
                        f"{text} built feed_forward weights of shapes gate_proj {list(got[0])}, "
                        f"up_proj {list(got[1])}, down_proj {list(got[2])}; expected d_ff = {want}: "
                        f"int(2 * 4 * {C} / 3) = {int(8 * C / 3)}, rounded UP to a multiple of {multiple_of}",
                        f"{text} 建出的 feed_forward 权重形状为 gate_proj {list(got[0])}、"
                        f"up_proj {list(got[1])}、down_proj {list(got[2])}；应为 d_ff = {want}："
                        f"int(2 * 4 * {C} / 3) = {int(8 * C / 3)}，再向上取整到 {multiple_of} 的倍数",
                    ),
                    what="d_ff",
                    actual=got,
                    expected=expected,
                )
        options = {"num_kv_heads": 1, "multiple_of": multiple_of, "norm_eps": 1e-3}
        run_cases(kata, rng, gen, [case | {"pos": "default"}], torch.float32, options=options)


@core(zh="默认值：MHA、Llama 的 d_ff、rope_base 10000、eps 1e-6")
def test_defaults_are_mha_llamas_d_ff_rope_base_10000_and_eps_1e_6(kata, rng, gen):
    """LlamaBlock(d_model, num_heads) alone, on inputs small enough (std 1e-3) that eps=1e-6 matters."""
    cases = [case | {"KV": case["H"]} for case in CASES.random(rng, 2)]
    run_cases(kata, rng, gen, cases, torch.float32, options={}, std=1e-3)


@core(zh="参数与 Llama 块完全一致")
def test_has_exactly_the_parameters_of_a_llama_block(kata, rng, gen):
    """attention_norm.weight, attention.{q,k,v,o}_proj.weight, ffn_norm.weight,
    feed_forward.{gate,up,down}_proj.weight: no biases, k and v projecting to KV * hs."""
    case = CASES.random(rng, 1)[0]
    with case.judged():
        modules.call(BLOCK, kata, build(gen, rng, case), inputs(gen, case))


@core(zh="自己实现注意力")
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs."""
    case = CASES.random(rng, 1)[0]
    built = build(gen, rng, case)
    modules.call(BLOCK, kata, built, inputs(gen, case))
    modules.call(BLOCK, kata, built, inputs(gen, case), positions=make_positions(gen, case["T"], "gaps"))


# --------------------------------------------------------------------------- conventions


@convention(
    "float16 and bfloat16 work at positions past their exact integers (2048 and 256): ...",
    zh="半精度下位置超出其能精确表示的整数时仍可用",
)
@dtypes(*HALF)
def test_works_in_half_precision_at_positions_past_its_exact_integers(kata, rng, gen, dtype):
    """Positions from 2100 on: float16 holds integers exactly only up to 2048, bfloat16 up to 256;
    the angles must be computed in float32 or better."""
    run_cases(kata, rng, gen, CASES.random(rng, 2), dtype, kind="offset", offset=rng.randint(2100, 3000))


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The edge cases and a draw at positions past 100 (where angles computed in float32 are
    off by 1e-5 rad), judged with float64's own tolerance."""
    run_cases(kata, rng, gen, CASES.cases(rng, 2), torch.float64, float64_throughout=True)
    far = {"kind": "offset", "offset": rng.randint(100, 150)}
    run_cases(kata, rng, gen, CASES.random(rng, 1), torch.float64, **far, float64_throughout=True)


@convention(
    "raise ValueError unless d_model % num_heads == 0, num_heads % num_kv_heads == 0 and the head size",
    zh="尺寸无法整除时抛出 ValueError",
)
def test_raises_value_error_for_sizes_that_do_not_split(kata, rng):
    """d_model not divisible by num_heads, num_heads not by num_kv_heads, an odd head size."""
    H = rng.randint(2, 5)
    for args, reason in (
        (
            (2 * H * rng.randint(1, 3) + 1, H),
            pick("d_model cannot be split evenly into num_heads heads", "d_model 无法平均分成 num_heads 个头"),
        ),
        (
            (4 * 6, 6, 4),
            pick("6 query heads cannot be shared evenly by 4 kv heads", "6 个查询头无法平均分给 4 个 kv 头"),
        ),
        (
            (3 * H, H),
            pick(
                f"the head size {3 * H} // {H} = 3 is odd: RoPE rotates pairs",
                f"头大小 {3 * H} // {H} = 3 是奇数：RoPE 按对旋转",
            ),
        ),
    ):
        named = dict(zip(("d_model", "num_heads", "num_kv_heads"), args))
        positional = {k: v for k, v in named.items() if k != "num_kv_heads"}
        keywords = {k: v for k, v in named.items() if k == "num_kv_heads"}
        modules.check_raises(BLOCK, kata, positional, keywords, expected=ValueError, reason=reason)


@convention(
    "results follow the input's device (the default positions and the causal mask made inside forward too).",
    zh="结果跟随输入所在的 device",
)
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """Default positions, then explicit ones on the input's device."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    options = {"num_kv_heads": case["KV"], "d_ff": case["F"], "rope_base": ROPE_BASES[0]}
    options["norm_eps"] = NON_DEFAULT_EPS[0]
    for given in (False, True):

        def make(gen, device, given=given):
            positions = {"positions": make_positions(gen, case["T"], "offset", 7).to(device)} if given else {}
            return inputs(gen, case, device=device), positions

        modules.check_on_device(BLOCK, kata, case, options, other_device, make)


@convention("x and positions are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    case = CASES.random(rng, 1)[0]
    built = build(gen, rng, case)
    positions = make_positions(gen, case["T"], "gaps")
    modules.assert_inputs_left_alone(BLOCK, kata, built, inputs(gen, case), positions=positions)

"""swiglu: judged against a float64 reference composed of nn.Linear and F.silu.

PyTorch has no SwiGLU module, so the reference is a small nn.Module below whose three
projections carry the kata's names (gate_proj, up_proj, down_proj): every weight and bias
random (gate and up drawn independently, so swapping them shows), copied in by name. Its
d_ff=None rule (Llama's: int(2 * 4 * d_model / 3) rounded UP to a multiple of multiple_of)
is computed here independently, in integers, and judged on its own first, on the sizes
where rounding down, rounding up, ignoring multiple_of and an exact multiple all differ.

x may have any leading dimensions ([..., d_model], none included): the docstring says so, the
edge cases include [T, C], [B, T, C] and [A, B, T, C], and a test of its own adds a single
vector [C].
"""

import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import NONE
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import Mismatch
from judge.testing.inputs import randn
from judge.testing.modules import ModuleKata
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, Case, CaseTable, KataSpec, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype

FULL = [torch.float64, torch.float32]  # float64 first: the edge cases run in it, and show first
HALF = [torch.float16, torch.bfloat16]
DEFAULT_MULTIPLE_OF = 256

# (rtol, atol) for the output, against the float64 reference rounded to the dtype under test.
# Measured over 200 seeds x (the 6 edge cases + 3 random draws), on the solution and both
# variants (einsum with a separate bias add, one fused gate/up matmul): float32 at most 0.13
# of the tolerance below (2.4e-6 absolute); at d_model 512 and 1024 (d_ff 1536, 2816), 10
# seeds, at most 0.21. float16 at most 0.23 of its tolerance (4.9e-3 absolute), bfloat16 at
# most 0.27 (0.047 absolute: the einsum variant rounds the bias add separately). Every slip
# is caught in float64, whose tolerance stays tight.
TOLERANCES = per_dtype(float64=(1e-7, 1e-7), float32=(1e-5, 1e-5), float16=(1.5e-2, 1.5e-2), bfloat16=(1.5e-1, 1.5e-1))


def llama_d_ff(d_model: int, multiple_of: int) -> int:
    """The d_ff=None rule, in integers: floor(8 * d_model / 3), then the smallest multiple of
    multiple_of not below it."""
    hidden = (8 * d_model) // 3
    return -(-hidden // multiple_of) * multiple_of


def d_ff_of(case) -> int:
    if case["F"] is not None:
        return case["F"]
    return llama_d_ff(case["C"], case["M"] or DEFAULT_MULTIPLE_OF)


class Reference(nn.Module):
    """SwiGLU in float64 from PyTorch's own parts: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, d_model: int, d_ff: int, bias: bool):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias, dtype=torch.float64)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias, dtype=torch.float64)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias, dtype=torch.float64)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# --------------------------------------------------------------------------- the case table
#
# Sizes: lead = x's leading dimensions (x is [*lead, C]), C = d_model, F = the explicit d_ff
# (None: the default rule), M = multiple_of (None: not passed, the default 256), bias.

# fmt: off
EDGES = (  # the most telling first
    edge("default d_ff, 8*C/3 not an integer: 26 rounded up to 32", "默认 d_ff，8*C/3 不是整数：26 向上取整为 32",
         lead=(2, 3), C=10, F=None, M=8, bias=False),
    edge("default d_ff already a multiple of multiple_of: 32 stays", "默认 d_ff 已是 multiple_of 的倍数：32 保持不变",
         lead=(3, 4), C=12, F=None, M=32, bias=True),
    edge("explicit odd d_ff, used as given, one position per sequence",
         "显式给出的奇数 d_ff 按原值使用，每个序列一个位置",
         lead=(3, 1), C=7, F=13, M=8, bias=True),
    edge("no batch dimension: x is [T, C]", "没有批维度：x 为 [T, C]",
         lead=(5,), C=6, F=9, M=None, bias=False),
    edge("two batch dimensions, default multiple_of 256", "两个批维度，默认 multiple_of 256",
         lead=(2, 3, 4), C=5, F=None, M=None, bias=True),
    edge("d_model 1, multiple_of 1, one position", "d_model 1，multiple_of 1，一个位置",
         lead=(1, 1), C=1, F=None, M=1, bias=False),
)
# fmt: on


def draw(rng, count: int) -> list[dict]:
    """Leading dimensions [B, T], then [T], then [A, B, T] ..., all differing from each other
    and from C; the even draws use the default rule (multiple_of drawn), the odd ones an odd
    explicit d_ff wider than C."""
    cases = []
    for index in range(count):
        C = rng.randint(2, 24)
        lead = tuple(rng.sample([n for n in range(2, 10) if n != C], (2, 1, 3)[index % 3]))
        if index % 2 == 0:
            F_, M = None, rng.choice([None, 1, 8, 16, 32])
        else:
            F_ = rng.choice([n for n in range(C + 1 + C % 2, 3 * C + 8, 2) if n not in lead])
            M = rng.choice([None, 8])
        cases.append({"lead": lead, "C": C, "F": F_, "M": M, "bias": rng.random() < 0.5})
    return cases


CASES = CaseTable(draw=draw, edges=EDGES, draws=3)

# The d_ff=None rule on its own: (C, M) where rounding down, rounding up, an exact multiple,
# ignoring multiple_of and dropping the 2/3 give different widths, and Llama's own sizes.
# fmt: off
D_FF_EDGES = (
    edge("8*C/3 = 26.67: 26 rounds up to 32 (down would be 24)", "8*C/3 = 26.67：26 向上取整为 32（向下取整会是 24）",
         C=10, F=None, M=8),
    edge("8*C/3 = 24, already a multiple of 8: it stays 24 (not 32)", "8*C/3 = 24，已是 8 的倍数：保持 24（不是 32）",
         C=9, F=None, M=8),
    edge("an explicit d_ff is used as given, even when not a multiple", "显式给出的 d_ff 按原值使用，即使它不是倍数",
         C=7, F=13, M=8),
    edge("default multiple_of 256: 24 rounds up to 256 (down would be 0)",
         "默认 multiple_of 256：24 向上取整为 256（向下取整会是 0）",
         C=9, F=None, M=None),
    edge("default multiple_of 256: 256 is already a multiple", "默认 multiple_of 256：256 已经是倍数",
         C=96, F=None, M=None),
    edge("multiple_of 1: int(2.67) = 2 is kept, truncated, not rounded",
         "multiple_of 为 1：int(2.67) = 2 截断后保留，不四舍五入",
         C=1, F=None, M=1),
    edge("multiple_of 1: int(13.33) = 13", "multiple_of 为 1：int(13.33) = 13",
         C=5, F=None, M=1),
    edge("8*C/3 = 32, already a multiple of 32: it stays 32", "8*C/3 = 32，已是 32 的倍数：保持 32",
         C=12, F=None, M=32),
    edge("Llama-7B: d_model 4096 gives 11008", "Llama-7B：d_model 4096 得到 11008",
         C=4096, F=None, M=None),
    edge("Llama-13B: d_model 5120 gives 13824", "Llama-13B：d_model 5120 得到 13824",
         C=5120, F=None, M=None),
)
# fmt: on


def draw_d_ff(rng, count: int) -> list[Case]:
    found = []
    for index in range(count):
        C = rng.randint(2, 400)
        if index % 3 == 2:
            M = rng.choice([8, 64, None])
            F_ = rng.choice([n for n in range(C + 1, 4 * C) if n % (M or DEFAULT_MULTIPLE_OF)])
            found.append(Case(f"random draw {index + 1}", {"C": C, "F": F_, "M": M}, zh=f"随机抽取 {index + 1}"))
        else:
            found.append(
                Case(
                    f"random draw {index + 1}",
                    {"C": C, "F": None, "M": rng.choice([1, 3, 16, 64, None])},
                    zh=f"随机抽取 {index + 1}",
                )
            )
    return found


# --------------------------------------------------------------------------- the module kata


def arguments(case, options):
    """SwiGLU(d_model, [d_ff=], [multiple_of=], [bias=True]): defaults left out, so they are judged."""
    keywords = {}
    if case["F"] is not None:
        keywords["d_ff"] = case["F"]
    if case["M"] is not None:
        keywords["multiple_of"] = case["M"]
    if case["bias"]:
        keywords["bias"] = True
    return {"d_model": case["C"]}, keywords


SWIGLU = ModuleKata(
    kata="swiglu",
    cls="SwiGLU",
    asks=pick(
        "gate_proj, up_proj (each nn.Linear(d_model, d_ff, bias=bias)) and "
        "down_proj (nn.Linear(d_ff, d_model, bias=bias))",
        "gate_proj、up_proj（各为 nn.Linear(d_model, d_ff, bias=bias)）和 "
        "down_proj（nn.Linear(d_ff, d_model, bias=bias)）",
    ),
    inputs=("x",),
    reference=lambda case, options: Reference(case["C"], d_ff_of(case), case["bias"]),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=arguments,
    forward=lambda reference, inputs, kwargs: ({"output": reference(inputs["x"]).detach()}, None),
    tolerances=TOLERANCES,
)


def benchmark(kata, device):
    """(kata call, reference call): x [8, 128, 512] with the default d_ff (1365 -> 1536) and no
    bias, in eval() mode; the reference is the same composition of nn.Linear and F.silu in float32."""
    B, T, C = 8, 128, 512
    reference = Reference(C, llama_d_ff(C, DEFAULT_MULTIPLE_OF), bias=False).float().to(device).eval()
    module = kata.SwiGLU(C)
    modules.load_state(module, dict(reference.named_parameters()))
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)
    return (lambda: module(x)), (lambda: reference(x))


SPEC = KataSpec(
    kata="swiglu",
    symbol="SwiGLU",
    reference="down_proj(F.silu(gate_proj(x)) * up_proj(x)) from nn.Linear, in float64, every weight and bias random",
    forbidden=NONE,
    tolerances=TOLERANCES,
    tolerance_note="three matmuls and a SiLU: the solution and variants measured at most 0.13 of these "
    "in float32 (0.21 at d_model 1024)",
    cases=CASES,
    benchmark=benchmark,
)


def build(gen, case, dtype=torch.float32, device="cpu") -> modules.Built:
    return modules.build(SWIGLU, gen, case, {}, dtype, device)


def inputs(gen, case, dtype=torch.float32, device="cpu") -> dict:
    return {"x": randn(gen, *case["lead"], case["C"], dtype=dtype, device=device)}


def check(kata, built, x, **kwargs) -> None:
    modules.check(SWIGLU, kata, built, x, **kwargs)


# --------------------------------------------------------------------------- d_ff


@scenario
def hidden_widths(kata, positional: list, keywords: dict) -> dict:
    """The shapes of a new SwiGLU's projection weights (None where there is no such 2-D
    weight), the module built on the "meta" device: shapes only, so Llama's own sizes cost nothing."""
    with torch.device("meta"):
        module = kata.SwiGLU(*positional, **keywords)
    found = {}
    for part in ("gate_proj", "up_proj", "down_proj"):
        weight = getattr(getattr(module, part, None), "weight", None)
        found[part] = list(weight.shape) if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None
    return found


def widths(found: dict, name: str) -> tuple[int, int, int]:
    """(gate_proj's outputs, up_proj's outputs, down_proj's inputs), read from the weights' shapes."""
    widths = []
    for part, axis in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
        if found[part] is None:
            raise AssertionError(
                pick(
                    f"{name} has no {part} with a 2-D weight; the kata asks for {SWIGLU.asks} as attributes",
                    f"{name} 没有带二维 weight 的 {part}；题目要求以属性的形式提供 {SWIGLU.asks}",
                )
            )
        widths.append(int(found[part][axis]))
    return tuple(widths)


def expected_d_ff_text(case) -> str:
    if case["F"] is not None:
        return pick(
            f"d_ff={case['F']} was given: it is used as it is, never rounded to a multiple of multiple_of",
            f"给出了 d_ff={case['F']}：按原值使用，从不取整到 multiple_of 的倍数",
        )
    C, M = case["C"], case["M"] or DEFAULT_MULTIPLE_OF
    hidden = (8 * C) // 3
    text = f"int(2 * 4 * {C} / 3) = {hidden}"
    if hidden % M == 0:
        return text + pick(
            f" is already a multiple of {M}, so it stays {hidden}", f" 已是 {M} 的倍数，所以保持 {hidden}"
        )
    return text + pick(
        f", rounded UP to a multiple of {M}: {llama_d_ff(C, M)}", f"，向上取整到 {M} 的倍数：{llama_d_ff(C, M)}"
    )


def check_d_ff(kata, case) -> None:
    positional, keywords = arguments(case | {"bias": False}, {})
    name = modules.module_repr("SwiGLU", **positional, **keywords)

    def replay(implementation) -> dict:
        return {"d_ff": widths(hidden_widths(implementation, list(positional.values()), keywords), name)}

    want = (d_ff_of(case),) * 3
    with case.judged(), SPEC.diagnosing(replay, case):
        got = replay(kata)["d_ff"]
        if got != want:
            parts = ", ".join(f"{part} {w}" for part, w in zip(("gate_proj", "up_proj", "down_proj"), got))
            message = pick(
                f"{name} has d_ff = {got[0]}, expected {want[0]}: {expected_d_ff_text(case)}",
                f"{name} 的 d_ff = {got[0]}，应为 {want[0]}：{expected_d_ff_text(case)}",
            )
            if len(set(got)) > 1:
                message = pick(
                    f"{name} has different hidden widths ({parts}), expected {want[0]} for all three: ",
                    f"{name} 的三个隐藏宽度不一致（{parts}），三者都应为 {want[0]}：",
                ) + expected_d_ff_text(case)
            raise Mismatch(message, what="d_ff", actual=got, expected=want)


@core(zh="d_ff 默认取 4 * d_model 的 2/3，向上取整到 multiple_of 的倍数")
def test_d_ff_defaults_to_two_thirds_of_4_d_model_rounded_up_to_a_multiple_of_multiple_of(kata, rng):
    """gate_proj and up_proj [d_ff, C], down_proj [C, d_ff], for d_ff=None and an explicit d_ff."""
    for case in (*D_FF_EDGES, *draw_d_ff(rng, 6)):
        check_d_ff(kata, case)


@core(zh="显式给出的 d_ff 按原值使用")
def test_an_explicit_d_ff_is_used_as_given(kata, rng):
    """Never rounded, whatever multiple_of is (passed or left at 256)."""
    for index in range(3):
        C = rng.randint(2, 64)
        F_ = rng.choice([n for n in range(C + 1, 4 * C + 2) if n % 8])
        check_d_ff(
            kata,
            Case(
                f"explicit d_ff {index + 1}", {"C": C, "F": F_, "M": (None, 8, 1)[index]}, zh=f"显式 d_ff {index + 1}"
            ),
        )


@core(zh="有 gate、up、down 三个投影，只在 bias=True 时带偏置")
def test_has_gate_up_and_down_projections_with_biases_exactly_when_bias_is_true(kata, rng, gen):
    """bias=True: a bias on all three; bias left out (False): none. Weights in nn.Linear layout."""
    drawn = Case("random draw", CASES.draw(rng, 2)[1], zh="随机抽取")
    for bias in (True, False):
        with (drawn | {"bias": bias}).judged() as case:
            check(kata, build(gen, case), inputs(gen, case))


# --------------------------------------------------------------------------- values


@core(zh="与 down_proj(silu(gate) * up) 一致")
@dtypes(*FULL)
def test_matches_down_proj_of_silu_gate_times_up(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check(kata, build(gen, case, dtype, device), inputs(gen, case, dtype, device))


@core(zh="任意前导维度都原样保留")
def test_any_leading_dimensions_pass_through(kata, rng, gen):
    """x [C], [T, C], [B, T, C] and [A, B, T, C] with the same module."""
    case = Case("leading dimensions", CASES.draw(rng, 2)[1], zh="前导维度")
    built = build(gen, case)
    for lead in ((), (5,), (3, 4), (2, 3, 4)):
        with (case | {"lead": lead}).judged():
            check(kata, built, inputs(gen, case | {"lead": lead}))


# --------------------------------------------------------------------------- conventions


@convention("float16 and bfloat16 inputs work, in their own dtype.", zh="在半精度下可用")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            check(kata, build(gen, case, dtype), inputs(gen, case, dtype))


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    for case in CASES.cases(rng, 2):
        with case.judged():
            check(kata, build(gen, case, torch.float64), inputs(gen, case, torch.float64), float64_throughout=True)


@convention("results follow the input's device.", zh="结果跟随输入所在的 device")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def make(gen, device):
        return inputs(gen, case, device=device), {}

    modules.check_on_device(SWIGLU, kata, case, {}, other_device, make)


@convention("x is never modified in place.", zh="不修改输入")
def test_does_not_modify_its_input(kata, rng, gen):
    """In every dtype: a kata may convert or scale x in place."""
    case = CASES.random(rng)[0]
    for dtype in (*FULL, *HALF):
        with case.judged():
            modules.assert_inputs_left_alone(SWIGLU, kata, build(gen, case, dtype), inputs(gen, case, dtype))

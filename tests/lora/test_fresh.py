"""lora: the fresh module, judged on its own: lora_A [r, in] and lora_B [out, r] as Parameters
with the base's dtype, lora_B exactly zero, lora_A inside [-1/sqrt(in), 1/sqrt(in)]
(Kaiming-uniform with a = sqrt(5)), spread like that uniform and centred (on 4800 values:
thresholds 15 standard deviations away, a false failure has odds below 1e-18), the output
exactly base(x); the base frozen and its values untouched (by the kata's word, the parameters
that require grad, and by value, one optimiser step that leaves the base as it was); scaling a
Python float; a rank below 1 refused."""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from judge.language import pick
from judge.testing.checks import Mismatch, assert_close
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import Case, dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    EXACT,
    FULL,
    HALF,
    SPEC,
    TOLERANCES,
    build,
    check_forward,
    check_lora_parameter,
    construct,
    fresh,
    fresh_base,
    inputs,
    name_of,
    scaling_of,
    uniform_example,
    without_dropout,
)

# --------------------------------------------------------------------------- scenarios


@scenario
def training_step(kata, recipe: dict, x, upstream) -> dict:
    """A new module around a fresh base, then one SGD step over module.parameters() on
    sum(module(x) * upstream): which parameters require grad, and the values of the nn.Linear
    passed in after construction and after the step."""
    base = fresh_base(recipe)
    module = construct(kata, recipe, base)
    seen = {"trainable": sorted(name for name, p in module.named_parameters() if p.requires_grad)}
    seen |= {f"base.{name} after construction": p.detach().clone() for name, p in base.named_parameters()}
    optimiser = torch.optim.SGD(module.parameters(), lr=0.5)
    output = module.train(recipe["train"])(x)
    if isinstance(output, torch.Tensor) and output.requires_grad:
        (output * upstream).sum().backward()
        optimiser.step()
    seen |= {f"base.{name} after a training step": p.detach().clone() for name, p in base.named_parameters()}
    return seen


@scenario
def built_with_rank(kata, in_features: int, out_features: int, r: int) -> dict:
    """What LoRALinear(nn.Linear(in_features, out_features), r) raised (its class and base
    classes' names), or that it returned."""
    base = nn.Linear(in_features, out_features)
    try:
        kata.LoRALinear(base, r)
    except NotImplementedError:  # the stub: its own verdict
        raise
    except Exception as error:  # noqa: BLE001 - the judge decides what was expected
        return {"raised": [cls.__name__ for cls in type(error).__mro__], "message": str(error)}
    return {"returned": "normally"}


# --------------------------------------------------------------------------- checks


def check_kaiming_uniform(A: torch.Tensor, case, dtype, init_seed: int, call: str, *, statistics: bool) -> None:
    """lora_A inside +-1/sqrt(in_features), not all zero; with `statistics` (thousands of values),
    spread and centred like that uniform: its mean of squares within 20% of bound^2 / 3 and its
    mean within 0.15 bound (Hoeffding: a correct draw of 4800 values fails with odds below 1e-18)."""
    bound = 1 / math.sqrt(case["I"])
    values = A.detach().cpu().double()
    example = uniform_example(case, dtype, init_seed)

    def off(message: str) -> Mismatch:
        return Mismatch(
            pick(
                f"{call}.lora_A {message}; nn.Linear's initialisation, nn.init.kaiming_uniform_(lora_A, a=math.sqrt(5)), "
                f"is uniform in [-1/sqrt(in_features), 1/sqrt(in_features)] = [-{bound:.4g}, {bound:.4g}] "
                f"(in_features = {case['I']}, fan_in of lora_A [r, in_features])",
                f"{call}.lora_A {message}；nn.Linear 的初始化 nn.init.kaiming_uniform_(lora_A, a=math.sqrt(5)) "
                f"在 [-1/sqrt(in_features), 1/sqrt(in_features)] = [-{bound:.4g}, {bound:.4g}] 上均匀分布"
                f"（in_features = {case['I']}，即 lora_A [r, in_features] 的 fan_in）",
            ),
            what="lora_A",
            actual=A,
            expected=example,
            tolerance=TOLERANCES[dtype],
        )

    if values.numel() >= 8 and not bool((values != 0).any()):  # one value may be 0 (odds 6e-8 in float32)
        raise off(
            pick(
                "is all zeros: with lora_A and lora_B both zero neither gets a gradient and the adapter never trains "
                "(only lora_B starts at zero)",
                "全是 0：lora_A 和 lora_B 都为 0 时，两者都得不到梯度，适配器永远训练不起来（只有 lora_B 从 0 开始）",
            )
        )
    slack = bound * 2 * torch.finfo(dtype).eps  # the bound itself, rounded to the dtype
    if bool((values.abs() > bound + slack).any()):
        largest = values.abs().max().item()
        raise off(
            pick(f"reaches {largest:.4g}, outside the bound {bound:.4g}", f"达到了 {largest:.4g}，超出了界 {bound:.4g}")
        )
    if not statistics:
        return
    if float(values.std()) == 0:
        constant = values.flatten()[0].item()
        raise off(pick(f"is the constant {constant:.4g}", f"是常数 {constant:.4g}"))
    square = float((values**2).mean()) / (bound**2 / 3)
    if not 0.8 <= square <= 1.2:
        raise off(
            pick(
                f"spreads {math.sqrt(square):.3g} times as wide as a uniform over the bound (std {values.std():.4g})",
                f"的分布宽度是该区间上均匀分布的 {math.sqrt(square):.3g} 倍（标准差 {values.std():.4g}）",
            )
        )
    mean = float(values.mean())
    if abs(mean) > 0.15 * bound:
        raise off(
            pick(
                f"is not centred on 0: its mean is {mean:.4g} ({mean / bound:.2f} of the bound)",
                f"不以 0 为中心：均值为 {mean:.4g}（界的 {mean / bound:.2f} 倍）",
            )
        )


@contextlib.contextmanager
def fresh_parameters(kata, gen, case, dtype):
    """A fresh module's lora_A [r, in_features] and lora_B [out_features, r], checked to be
    trainable nn.Parameters in the base's dtype; yields (what the kata reported, the recipe,
    how the module was built). A failure in the block is diagnosed on the same module."""
    model = build(gen, case, dtype, trained=False)
    call = name_of(case, dtype)
    with SPEC.diagnosing(lambda implementation: fresh(implementation, model.recipe), case):
        seen = fresh(kata, model.recipe)
        check_lora_parameter(seen, "lora_A", (case["r"], case["I"]), dtype, "cpu", call)
        check_lora_parameter(seen, "lora_B", (case["O"], case["r"]), dtype, "cpu", call)
        yield seen, model.recipe, call


def check_parameters(kata, rng, gen, dtype) -> None:
    """lora_A [r, in_features], lora_B [out_features, r]: trainable nn.Parameters in the base's dtype."""
    for case in CASES.cases(rng, edges=dtype in (torch.float64, torch.float16)):
        with case.judged(), fresh_parameters(kata, gen, case, dtype):
            pass


# --------------------------------------------------------------------------- tests


@core(zh="lora_A 和 lora_B 是与 base 同 dtype 的参数")
@dtypes(*FULL)
def test_lora_A_and_lora_B_are_parameters_with_the_dtype_of_the_base(kata, rng, gen, dtype):
    """lora_A [r, in_features], lora_B [out_features, r], both trainable nn.Parameters."""
    check_parameters(kata, rng, gen, dtype)


@core(zh="lora_B 从 0 开始，lora_A 像 nn.Linear 一样做 Kaiming 均匀初始化")
@dtypes(torch.float32, torch.float64)
def test_lora_B_starts_at_zero_and_lora_A_is_kaiming_uniform_like_nn_linear(kata, rng, gen, dtype):
    """lora_B exactly zero; lora_A uniform in +-1/sqrt(in_features): on every case its bounds, on
    a module of 4800 values also its spread and mean."""
    big = Case(
        "4800 values in lora_A",
        {"lead": (2,), "I": 300, "O": 200, "r": 16, "alpha": None, "bias": True, "p": 0.0},
        zh="lora_A 中有 4800 个值",
    )
    for case in (big, *CASES.cases(rng, edges=dtype == torch.float32)):
        with case.judged(), fresh_parameters(kata, gen, case, dtype) as (seen, recipe, call):
            B = seen["lora_B"]
            if bool((B != 0).any()):
                raise Mismatch(
                    pick(
                        f"{call}.lora_B starts at {B.flatten()[:4].tolist()}...; expected all zeros, so that "
                        "the fresh module's output is exactly base(x) (lora_A, not lora_B, gets the random start)",
                        f"{call}.lora_B 的初始值是 {B.flatten()[:4].tolist()}...；应全为 0，这样新模块的输出才恰好是 "
                        "base(x)（随机初始化的是 lora_A，而不是 lora_B）",
                    ),
                    what="lora_B",
                    actual=B,
                    expected=torch.zeros_like(B),
                    tolerance=EXACT,
                )
            check_kaiming_uniform(seen["lora_A"], case, dtype, recipe["init_seed"], call, statistics=case is big)


@core(zh="新模块的输出就是 base 的输出")
@dtypes(*FULL)
def test_a_fresh_module_gives_the_base_output(kata, rng, gen, dtype, device):
    """Its own lora_A and lora_B (zero): base(x), in eval() and in train() mode."""
    for index, case in enumerate(without_dropout(CASES.cases(rng, edges=dtype == torch.float64))):
        with case.judged():
            model = build(gen, case, dtype, device, trained=False, train=index % 2 == 1)
            hint = pick(
                "A fresh module's lora_B is zero, so its output is exactly base(x), in train() mode too",
                "新模块的 lora_B 为 0，所以它的输出恰好是 base(x)，train() 模式下也一样",
            )
            check_forward(kata, model, inputs(gen, case, dtype, device), hint=hint)


@core(zh="base 冻结且不被改动，只训练 lora_A 和 lora_B")
def test_the_base_is_frozen_untouched_and_only_lora_A_and_lora_B_train(kata, rng, gen):
    """The nn.Linear passed in keeps its values; named_parameters() requiring grad: lora_A and
    lora_B, nothing else (base.weight and base.bias have requires_grad=False); and one SGD step
    over module.parameters() leaves the base's values as they were."""
    for case in without_dropout(CASES.cases(rng)):
        with case.judged():
            model = build(gen, case, trained=False, train=True)
            x = inputs(gen, case)
            upstream = randn(gen, *case["lead"], case["O"])
            call = name_of(case)
            sent = model.recipe["base"]

            def replay(implementation, model=model, x=x, upstream=upstream) -> dict:
                return training_step(implementation, model.recipe, x, upstream)

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                for name, value in sent.items():
                    what = f"base.{name} after construction"
                    frozen = pick(
                        "The base is frozen as it is, never re-initialised or scaled",
                        "base 原样冻结，绝不重新初始化或缩放",
                    )
                    assert_close(seen[what], value, call=call, what=what, tolerance=EXACT, hint=frozen)
                want = ["lora_A", "lora_B"]
                if seen["trainable"] != want:
                    extra = [n for n in seen["trainable"] if n.startswith("base.")]
                    hint = (
                        pick(
                            f": {' and '.join(extra)} must be frozen (requires_grad=False)",
                            f"：{'、'.join(extra)} 必须冻结（requires_grad=False）",
                        )
                        if extra
                        else pick(
                            ": lora_A and lora_B are nn.Parameters that require grad; base's are frozen",
                            "：lora_A 和 lora_B 是需要梯度的 nn.Parameter；base 的参数是冻结的",
                        )
                    )
                    raise Mismatch(
                        pick(
                            f"{call}: the parameters that require grad are {seen['trainable']}; expected {want}{hint}",
                            f"{call}：需要梯度的参数是 {seen['trainable']}；应为 {want}{hint}",
                        ),
                        what="trainable",
                        actual=seen["trainable"],
                        expected=want,
                    )
                for name, value in sent.items():
                    what = f"base.{name} after a training step"
                    try:
                        assert_close(seen[what], value, call=call, what=what, tolerance=EXACT)
                    except Mismatch as error:
                        error.args = (
                            pick(
                                f"{error}. One SGD step over module.parameters() changed the base: freeze "
                                "base.weight and base.bias (requires_grad=False), so that only lora_A and lora_B train",
                                f"{error}。对 module.parameters() 做一步 SGD 改变了 base：请冻结 base.weight 和 "
                                "base.bias（requires_grad=False），只让 lora_A 和 lora_B 训练",
                            ),
                        )
                        raise


@convention("lora_A and lora_B have base.weight's dtype and device", zh="lora_A 和 lora_B 跟随半精度的 base")
@dtypes(*HALF)
def test_lora_A_and_lora_B_follow_a_half_precision_base(kata, rng, gen, dtype):
    """A float16 or bfloat16 base: lora_A and lora_B in its dtype."""
    check_parameters(kata, rng, gen, dtype)


@convention(
    "self.scaling = alpha / r, a Python float; alpha=None means alpha = r (scaling 1.0).",
    zh="scaling 是 alpha / r，类型为 Python float",
)
def test_scaling_is_alpha_over_r_as_a_python_float(kata, rng, gen):
    for case in CASES.cases(rng):
        with case.judged():
            model = build(gen, case, trained=False)
            with SPEC.diagnosing(lambda implementation, model=model: fresh(implementation, model.recipe), case):
                got, want = fresh(kata, model.recipe)["scaling"], scaling_of(case)
                alpha = (
                    pick("alpha=None means alpha = r", "alpha=None 表示 alpha = r")
                    if case["alpha"] is None
                    else f"alpha / r = {case['alpha']} / {case['r']}"
                )
                if not isinstance(got, float) or isinstance(got, bool) or not math.isclose(got, want, rel_tol=1e-12):
                    kind = type(got).__name__
                    shown = f"{got!r}" if isinstance(got, (int, float, str)) else pick(f"a {kind}", f"一个 {kind}")
                    raise Mismatch(
                        pick(
                            f"{name_of(case)}.scaling is {shown}; expected {alpha} = {want!r}, a Python float",
                            f"{name_of(case)}.scaling 是 {shown}；应为 {alpha} = {want!r}，且是 Python float",
                        ),
                        what="scaling",
                        actual=got,
                        expected=want,
                    )


@convention("raise ValueError when r < 1.", zh="秩小于 1 时抛出 ValueError")
def test_a_rank_below_1_raises_value_error(kata, rng):
    case = CASES.random(rng)[0]
    for r in (0, -1, -rng.randint(2, 5)):
        call = f"LoRALinear(nn.Linear({case['I']}, {case['O']}), r={r})"

        def check(implementation, r=r, call=call) -> dict:
            got = built_with_rank(implementation, case["I"], case["O"], r)
            if "returned" in got:
                raise AssertionError(
                    pick(
                        f"{call} returned normally; expected ValueError (r must be at least 1)",
                        f"{call} 正常返回了；应抛出 ValueError（r 至少为 1）",
                    )
                )
            if "ValueError" not in got["raised"]:
                raise AssertionError(
                    pick(
                        f"{call} raised {got['raised'][0]}: {got['message']}; expected ValueError (r must be at least 1)",
                        f"{call} 抛出了 {got['raised'][0]}: {got['message']}；应抛出 ValueError（r 至少为 1）",
                    )
                )
            return {}

        with SPEC.diagnosing(check, case | {"r": r}):
            check(kata)

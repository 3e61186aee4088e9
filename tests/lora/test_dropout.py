"""lora: the dropout on the low-rank branch's input (a convention, as the attention katas' dropout).

Dropout is judged without depending on how the learner draws its mask (nn.Dropout,
F.dropout, a bernoulli mask of its own): in train() the test sets lora_A to an orthogonal
[r, r] matrix (r = in_features) and lora_B to [identity; random], so the learner's output
reveals exactly which x it fed the branch: each element must be 0 or x / (1 - p) (x is kept
away from 0), the rest of the output must follow from that x, the base must see x untouched,
and the share of zeros must be p (within 0.1 over 3000 elements: 9 standard deviations). In
eval() the formula without dropout must hold, and so must a merged module's output in
train() mode (base(x) alone: no dropout once merged)."""

from __future__ import annotations

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, call_repr, describe
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import Case
from judge.testing.tiers import convention

from .common import CASES, SPEC, Model, build, made, output_scale, refused, run_forward, tolerance

# --------------------------------------------------------------------------- train() mode


def dropout_case(rng) -> Case:
    """r = in_features (lora_A square), more outputs than r, 3000 elements of x or more."""
    I = rng.randint(6, 10)
    lead = (rng.randint(5, 7), -(-3000 // (I * 5)))
    alpha = rng.choice([2.0 * I, 16, I / 2])
    p = rng.choice([0.2, 0.3, 0.6, 0.7])  # never 0.5: p read as the probability of keeping shows
    return Case(
        "dropout",
        {"lead": lead, "I": I, "O": I + rng.randint(1, 4), "r": I, "alpha": alpha, "bias": True, "p": p},
        zh="随机失活（dropout）",
    )


def revealing_values(gen, case) -> dict:
    """lora_A orthogonal [r, r]; lora_B the identity [r, r] stacked on random rows: the first r
    outputs of the branch are scaling * d @ lora_A.T, d the x the branch was fed."""
    r, O = case["r"], case["O"]
    A = torch.linalg.qr(randn(gen, r, r, dtype=torch.float64))[0]
    B = torch.cat([torch.eye(r, dtype=torch.float64), randn(gen, O - r, r, dtype=torch.float64, std=r**-0.5)])
    return {"lora_A": A, "lora_B": B}


def far_from_zero(gen, case, dtype=torch.float32) -> torch.Tensor:
    """x with every element in +-[0.5, 1.5]: kept (x / (1 - p)) and dropped (0) never look alike."""
    shape = (*case["lead"], case["I"])
    magnitude = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).double()
    return (magnitude * sign).to(dtype)


def nearest_dropout(reference, x: torch.Tensor, output: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """From the learner's output, the x its branch saw (assuming the base saw x), each element
    snapped to 0 or x / (1 - p), whichever is nearer: (the output that snapped x gives, the mask
    of dropped elements)."""
    x64, out64 = x.detach().cpu().double(), output.detach().cpu().double()
    r = reference.lora_A.shape[0]
    with torch.no_grad():
        branch = (out64 - reference.base(x64))[..., :r] / reference.scaling
        seen = branch @ torch.linalg.inv(reference.lora_A.T)  # d, with d @ A.T = branch
        kept = x64 / (1 - p)
        dropped = seen.abs() < (seen - kept).abs()
        snapped = torch.where(dropped, torch.zeros_like(kept), kept)
        expected = reference.base(x64) + (snapped @ reference.lora_A.T @ reference.lora_B.T) * reference.scaling
    return expected, dropped


def share(dropped: torch.Tensor) -> float:
    """The share of x's elements dropped, rounded (so two implementations that drop the same agree)."""
    return round(float(dropped.double().mean()), 6)


def revealed(implementation, model: Model, x) -> dict:
    """The learner's output in train() mode, the nearest output some dropout mask gives, and the
    share of x that mask drops."""
    output = run_forward(implementation, model, x)["output"]
    expected, dropped = nearest_dropout(model.reference, x, output, model.case["p"])
    return {"output": output, "expected": expected.float(), "share dropped": share(dropped)}


def check_dropout(kata, gen, case) -> None:
    """One call in train() mode on the revealing lora_A and lora_B, judged whatever mask was drawn."""
    model = build(gen, case, train=True, values=revealing_values(gen, case))
    x = far_from_zero(gen, case)
    call = call_repr(model.name, x) + pick(f" with dropout={case['p']}", f"（dropout={case['p']}）")
    with SPEC.diagnosing(lambda implementation: revealed(implementation, model, x), case):
        seen = revealed(kata, model, x)
        try:
            allowed = tolerance(torch.float32, output_scale(model.reference, x, 1 - case["p"]))
            assert_close(seen["output"], seen["expected"], call=call, what="output", tolerance=allowed)
        except Mismatch as error:
            error.args = (
                pick(
                    f"{error}. The output is not base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling for any "
                    "dropout mask (expected: the nearest output that is): in train() mode the dropout zeroes "
                    "elements of x, scales the others by 1 / (1 - p), and feeds the result to the low-rank branch "
                    "only; base(x) sees x untouched",
                    f"{error}。无论用哪个 dropout 掩码，输出都不等于 base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling"
                    "（期望值：满足该式且最接近的输出）：train() 模式下，dropout 把 x 的部分元素置零，其余乘以 "
                    "1 / (1 - p)，结果只送入低秩分支；base(x) 看到的是原样的 x",
                ),
            )
            raise
        got = seen["share dropped"]
        if abs(got - case["p"]) > 0.1:
            raise Mismatch(
                pick(
                    f"{call} in train() mode zeroed {got:.1%} of the elements of x the low-rank branch sees; expected "
                    f"about p = {case['p']:.0%}" + (": the dropout is not applied in train() mode" if got == 0 else ""),
                    f"{call} 在 train() 模式下把低秩分支看到的 x 元素置零了 {got:.1%}；应约为 p = {case['p']:.0%}"
                    + ("：train() 模式下没有应用 dropout" if got == 0 else ""),
                ),
                what="share dropped",
                actual=got,
                expected=case["p"],
            )


@convention(
    "dropout: the probability of zeroing an element of x on the LoRA branch only, in train() mode only",
    zh="train() 模式下 dropout 只把低秩分支的输入置零",
)
def test_in_train_mode_dropout_zeroes_inputs_of_the_low_rank_branch_only(kata, rng, gen):
    """Whatever mask is drawn: each element the branch sees is 0 or x / (1 - p), the output
    follows from it, base(x) sees x untouched, and the share of zeros is p (within 0.1)."""
    for _ in range(2):
        with dropout_case(rng).judged() as case:
            check_dropout(kata, gen, case)


# --------------------------------------------------------------------------- eval() mode, and once merged


@scenario
def dropout_off(kata, recipe: dict, x) -> dict:
    """The learner's module with dropout p > 0: its output in eval() mode, then merged and in
    train() mode (what merge() raised, if it did)."""
    module, _, problem = made(kata, recipe)
    if problem:
        return problem
    seen = {"output in eval()": module.eval()(x)}
    try:
        module.merge()
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 - judged after the eval() output
        raised = pick(
            f"model.merge() raised {type(error).__name__}: {error}",
            f"model.merge() 抛出了 {type(error).__name__}: {error}",
        )
        return seen | {"raised": raised}
    seen["output in train() once merged"] = module.train()(x)
    return seen


@convention(
    "base(x) always sees x as it is, and eval() turns the dropout off.",
    zh="eval() 模式和已 merge 的模块不应用 dropout",
)
def test_eval_mode_and_a_merged_module_apply_no_dropout(kata, rng, gen):
    """Every case with a dropout (p > 0; 0.3 where a case has none): in eval() the formula
    without dropout; merged, in train() mode too (forward is base(x) alone)."""
    for case in CASES.cases(rng):
        case = case if case["p"] else case | {"p": 0.3}
        with case.judged():
            model = build(gen, case)
            x = randn(gen, *case["lead"], case["I"])
            want = model.reference.expected(x)
            allowed = tolerance(torch.float32, output_scale(model.reference, x))

            def replay(implementation, model=model, x=x) -> dict:
                return refused(model, dropout_off(implementation, model.recipe, x))

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                call = call_repr(model.name, x)
                assert_close(seen["output in eval()"], want, call=call, what="output in eval()", tolerance=allowed)
                if "raised" in seen:
                    raise AssertionError(
                        pick(f"model = {model.name}: {seen['raised']}", f"model = {model.name}：{seen['raised']}")
                    )
                what = "output in train() once merged"
                try:
                    text = pick(
                        f"model = {model.name}, x = {describe(x)}, after merge() and train(),",
                        f"model = {model.name}，x = {describe(x)}，经过 merge() 和 train() 之后",
                    )
                    assert_close(seen[what], want, call=text, what=what, tolerance=allowed)
                except Mismatch as error:
                    error.args = (
                        pick(
                            f"{error}. Once merged, forward is base(x) alone, in train() mode too: no dropout applies",
                            f"{error}。merge 之后，forward 只有 base(x)，train() 模式下也一样：不应用 dropout",
                        ),
                    )
                    raise

"""adamw, the conventions: argument validation, the closure, sparse gradients, the state's
form, the float64 rule and the gradients left alone (see common.py)."""

import torch
from torch import nn

from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, describe
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.spec import FLOAT64_RULE
from judge.testing.tiers import convention

from .common import (
    CASES,
    DEFAULTS,
    SPEC,
    Story,
    check_steps,
    closing,
    constructing,
    judge_grads,
    sparse_step,
    state_form,
    tolerance,
    train,
)


@convention(
    "lr < 0, eps < 0, a beta outside [0, 1) or weight_decay < 0 raises ValueError",
    zh="lr < 0、eps < 0、beta 不在 [0, 1) 内或 weight_decay < 0 时抛出 ValueError",
)
def test_bad_hyperparameters_raise_value_error(kata, gen):
    bad = [{"lr": -0.1}, {"eps": -1e-8}, {"betas": (1.0, 0.999)}, {"betas": (0.9, 1.0)}, {"betas": (-0.1, 0.999)}]
    bad += [{"weight_decay": -0.01}]
    fine = [{"lr": 0.0, "eps": 0.0, "betas": (0.0, 0.0), "weight_decay": 0.0}]
    param = randn(gen, 3)

    def replay(implementation) -> dict:
        found = constructing(implementation, param, bad + fine)
        return {f"AdamW([p], {', '.join(f'{k}={v!r}' for k, v in o.items())})": f for o, f in zip(bad + fine, found)}

    with diagnosing(SPEC.kata, replay, {}):
        got = replay(kata)
        for (call, found), expect in zip(got.items(), ["raised ValueError"] * len(bad) + ["returned normally"]):
            if found != expect:
                raise Mismatch(
                    pick(
                        f"{call} {found}; expected it to "
                        + ("work (0 is allowed)" if expect == "returned normally" else "raise ValueError"),
                        f"{call} {found.replace('raised', '抛出了').replace('returned normally', '正常返回了')}；"
                        + ("应正常工作（允许取 0）" if expect == "returned normally" else "应抛出 ValueError"),
                    ),
                    what=call,
                    actual=found,
                    expected=expect,
                )


@convention(
    "step(closure) calls closure() under torch.enable_grad() before updating",
    zh="step(closure) 在更新前于 torch.enable_grad() 下调用 closure()，并返回它的返回值",
)
def test_step_runs_the_closure_with_grad_enabled_and_returns_its_loss(kata, gen):
    param, target = randn(gen, 4, 3, dtype=torch.float64), randn(gen, 4, 3, dtype=torch.float64)
    options = {"lr": 0.05, "weight_decay": 0.1}
    p = nn.Parameter(param.clone())
    optimizer = torch.optim.AdamW([p], **options, foreach=False)
    p.grad = 2 * (p.detach() - target)
    optimizer.step()
    first = p.detach().clone()
    p.grad = p.detach() - target
    optimizer.step()
    call = f"AdamW([{describe(param)}], lr=0.05, weight_decay=0.1)"

    def replay(implementation) -> dict:
        return closing(implementation, param, target, options)

    with diagnosing(SPEC.kata, replay, {}):
        got = replay(kata)
        want = got["the closure's loss"]
        if not isinstance(got["step(closure) returned"], torch.Tensor) or want is None:
            raise Mismatch(
                pick(
                    f"{call}.step(closure) returned {describe(got['step(closure) returned'])}; "
                    "expected the closure's loss",
                    f"{call}.step(closure) 返回了 {describe(got['step(closure) returned'])}；应返回 closure 的 loss",
                ),
                what="step(closure) returned",
                actual=got["step(closure) returned"],
                expected=want,
            )
        assert_close(got["step(closure) returned"], want, call=f"{call}.step(closure)", what="step(closure) returned")
        steps = [(2 * (param - target), first), (first - target, p.detach())]
        allowed = tolerance(param, steps, DEFAULTS | options, torch.float64)
        what = "p after step(closure)"
        assert_close(got[what], first, call=f"{call}.step(closure)", what=what, tolerance=allowed)
        if got["step() returned"] is not None:
            raise Mismatch(
                pick(
                    f"{call}.step() returned {describe(got['step() returned'])}; expected None (no closure, no loss)",
                    f"{call}.step() 返回了 {describe(got['step() returned'])}；应返回 None（没有 closure 就没有 loss）",
                ),
                what="step() returned",
                actual=got["step() returned"],
                expected=None,
            )
        assert_close(got["p after step()"], p.detach(), call=f"{call}.step()", what="p after step()", tolerance=allowed)


@convention("a sparse gradient raises RuntimeError", zh="稀疏梯度抛出 RuntimeError")
def test_a_sparse_gradient_raises_runtime_error(kata, gen):
    param, grad = randn(gen, 5, 3), randn(gen, 5, 3)
    grad[1:3] = 0.0
    found = sparse_step(kata, param, grad)
    if not found.startswith("raised RuntimeError"):
        said = found.replace("raised", "抛出了").replace("returned normally", "正常返回了")
        raise AssertionError(
            pick(
                f"AdamW([float32[5, 3]]).step() with a sparse p.grad {found}; "
                "expected RuntimeError, as PyTorch's AdamW",
                f"p.grad 为稀疏张量时 AdamW([float32[5, 3]]).step() {said}；应像 PyTorch 的 AdamW 一样抛出 RuntimeError",
            )
        )


@convention(
    'state["step"] is torch.tensor(0.0) counted up (a 0-d float32 tensor), and a param that never had a '
    "gradient has no state",
    zh="state[\"step\"] 是从 torch.tensor(0.0) 累加的 0 维 float32 张量；从未有过梯度的参数没有状态",
)
def test_the_state_is_pytorchs_in_form(kata, gen):
    case = CASES.edges[2] | {"shapes": [[3], [2, 2], [4]], "steps": 3}
    story = Story(gen, case, torch.float32, missing=[[1, t] for t in range(3)] + [[2, 0]])
    want = {"state.keys()": [0, 2], "state[0]['step']": "float32 0-d tensor", "state[2]['step']": "float32 0-d tensor"}

    def replay(implementation) -> dict:
        return state_form(train(implementation, story))

    call = pick(f"after {story.steps} steps of {story.text}, optimizer", f"{story.text} 走了 {story.steps} 步之后，optimizer")
    with diagnosing(SPEC.kata, replay, story.case):
        got = replay(kata)
        for what, value in want.items():
            if got.get(what) != value:
                raise Mismatch(
                    pick(
                        f"{call}.state_dict(): {what} is {got.get(what)}; PyTorch's is {value} "
                        "(params[1] never had a gradient)",
                        f"{call}.state_dict()：{what} 是 {got.get(what)}；PyTorch 的是 {value}（params[1] 从未有过梯度）",
                    ),
                    what=what,
                    actual=got.get(what),
                    expected=value,
                )


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_params_are_computed_in_float64_throughout(kata, rng, gen):
    for case in (*CASES.edges[:2], CASES.edges[4], *CASES.random(rng, 2)):
        with case.judged():
            check_steps(kata, Story(gen, case, torch.float64), float64_throughout=True)


@convention("p.grad is never changed in place", zh="不原地修改 p.grad")
def test_the_gradients_are_left_alone(kata, rng, gen):
    for case in (CASES.edges[0], *CASES.random(rng, 1)):
        with case.judged():
            story = Story(gen, case, torch.float32)

            def judge(n, text, got, story=story) -> None:
                for i, g in enumerate(story.grads[n]):
                    if g is not None and not torch.equal(got[f"grads[{i}]"], g):
                        raise Mismatch(
                            pick(
                                f"{text}: params[{i}].grad was changed in place; leave the gradient as it is "
                                "(decay p itself, work on new tensors)",
                                f"{text}：params[{i}].grad 被原地修改了；请保持梯度不变（衰减作用在 p 本身，计算用新张量）",
                            ),
                            what=f"grads[{i}]",
                            actual=got[f"grads[{i}]"],
                            expected=g,
                        )

            judge_grads(kata, story, judge)

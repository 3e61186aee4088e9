"""lora: forward and its gradients, with lora_A and lora_B random (copied in, as training would
leave them): values against the float64 reference, gradients of lora_A, lora_B and x against
autograd through it; half precision, the float64 rule, devices and x left alone."""

from __future__ import annotations

import torch

from judge.language import pick
from judge.testing.checks import assert_close, call_repr, check_tensor_kind, describe, judge_on_device
from judge.testing.functions import assert_inputs_unchanged
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    EXACT,
    FULL,
    HALF,
    SPEC,
    Model,
    build,
    check_forward,
    inputs,
    made,
    magnitudes,
    merge_story,
    output_scale,
    placed,
    refused,
    run_forward,
    tolerance,
    uniform_example,
    without_dropout,
)

GRADIENTS = ("gradient of lora_A", "gradient of lora_B", "gradient of x")
GRADIENT_HINTS = {
    "output": "the forward itself is off: base(x) + (x @ lora_A.T @ lora_B.T) * scaling",
    "gradient of lora_A": "lora_A's gradient is scaling * (grad_output @ lora_B).T @ x, summed over the positions",
    "gradient of lora_B": "lora_B's gradient is scaling * grad_output.T @ (x @ lora_A.T), summed over the positions",
    "gradient of x": "x's gradient flows through both paths: grad_output @ base.weight + scaling * grad_output @ "
    "lora_B @ lora_A (the base is frozen, but it must stay in the graph: no torch.no_grad() around base(x))",
}
GRADIENT_HINTS_ZH = {
    "output": "forward 本身就不对：base(x) + (x @ lora_A.T @ lora_B.T) * scaling",
    "gradient of lora_A": "lora_A 的梯度是 scaling * (grad_output @ lora_B).T @ x，对所有位置求和",
    "gradient of lora_B": "lora_B 的梯度是 scaling * grad_output.T @ (x @ lora_A.T)，对所有位置求和",
    "gradient of x": "x 的梯度流经两条路径：grad_output @ base.weight + scaling * grad_output @ lora_B @ lora_A"
    "（base 是冻结的，但必须留在计算图中：不要在 base(x) 外面套 torch.no_grad()）",
}


@scenario
def differentiated(kata, recipe: dict, x, upstream) -> dict:
    """The output of the learner's module for x (made a leaf that requires grad) and autograd's
    gradients of sum(output * upstream) for lora_A, lora_B and x (None where none reached)."""
    module, _, problem = made(kata, recipe)
    if problem:
        return problem
    leaf = x.detach().clone().requires_grad_()
    output = module(leaf)
    if not isinstance(output, torch.Tensor) or not output.requires_grad:
        return {"output": output, "requires grad": False}
    grads = torch.autograd.grad(output, [module.lora_A, module.lora_B, leaf], upstream, allow_unused=True)
    return {"output": output.detach(), "requires grad": True} | dict(zip(GRADIENTS, grads))


def gradient_scales(reference, x: torch.Tensor, upstream: torch.Tensor) -> dict:
    """The largest sum of magnitudes each gradient adds up over the positions and features."""
    W, _, A, B = magnitudes(reference)
    s = reference.scaling
    a = x.detach().cpu().double().abs().reshape(-1, W.shape[1])
    g = upstream.detach().cpu().double().abs().reshape(-1, W.shape[0])
    found = {
        "output": output_scale(reference, x),
        "gradient of lora_A": s * ((g @ B).T @ a).max(),
        "gradient of lora_B": s * (g.T @ (a @ A.T)).max(),
        "gradient of x": (g @ W + s * (g @ B) @ A).max(),
    }
    return {k: float(v) if float(v) > 0 else 1.0 for k, v in found.items()}


def reference_gradients(reference, x: torch.Tensor, upstream: torch.Tensor) -> dict:
    twin = x.detach().cpu().double().requires_grad_()
    with torch.enable_grad():
        output = reference(twin)
        grads = torch.autograd.grad(output, [reference.lora_A, reference.lora_B, twin], upstream.cpu().double())
    return {"output": output.detach()} | dict(zip(GRADIENTS, grads))


def gradients_of(implementation, model: Model, x, upstream, call: str) -> dict:
    """The learner's output and gradients; fails with a message when autograd lost track."""
    got = refused(model, differentiated(implementation, model.recipe, x, upstream))
    if not got["requires grad"]:
        raise AssertionError(
            pick(
                f"{call} returned {describe(got['output'])} that does not require grad: autograd lost track of lora_A, "
                "lora_B and x (no torch.no_grad(), .detach() or .data inside forward)",
                f"{call} 返回的 {describe(got['output'])} 不需要梯度：autograd 跟丢了 lora_A、lora_B 和 x"
                "（forward 里不能有 torch.no_grad()、.detach() 或 .data）",
            )
        )
    for name, what in zip(("lora_A", "lora_B", "x"), GRADIENTS):
        if got[what] is None:
            raise AssertionError(
                pick(
                    f"{call}: no gradient reaches `{name}`: autograd must see every step of forward",
                    f"{call}：没有梯度到达 `{name}`：autograd 必须看到 forward 的每一步",
                )
            )
    return got


def check_gradients(kata, model: Model, x, upstream, *, float64_throughout: bool = False) -> None:
    want = reference_gradients(model.reference, x, upstream)
    scales = gradient_scales(model.reference, x, upstream)
    call = call_repr(model.name, x) + pick(
        " and autograd.grad(output, [lora_A, lora_B, x], grad_output)",
        "，再经 autograd.grad(output, [lora_A, lora_B, x], grad_output)",
    )
    with SPEC.diagnosing(lambda implementation: gradients_of(implementation, model, x, upstream, call), model.case):
        got = gradients_of(kata, model, x, upstream, call)
        for what, expected in want.items():
            expected = expected.to(dtype=x.dtype, device=x.device)
            allowed = tolerance(x.dtype, scales[what], float64_throughout=float64_throughout)
            hint = pick(GRADIENT_HINTS[what], GRADIENT_HINTS_ZH[what])
            assert_close(got[what], expected, call=call, what=what, tolerance=allowed, hint=hint)


@core(zh="lora_A 和 lora_B 随机时，与 base 加上缩放后的低秩更新一致")
@dtypes(*FULL)
def test_matches_base_plus_the_scaled_low_rank_update_with_random_lora_A_and_lora_B(kata, rng, gen, dtype, device):
    for case in without_dropout(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            check_forward(kata, build(gen, case, dtype, device), inputs(gen, case, dtype, device))


@core(zh="lora_A、lora_B 和 x 的梯度与经过参考实现的 autograd 一致")
@dtypes(*FULL)
def test_gradients_of_lora_A_lora_B_and_x_match_autograd_through_the_reference(kata, rng, gen, dtype, device):
    """In train() mode with dropout 0, as a training step runs it."""
    for case in without_dropout(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            model = build(gen, case, dtype, device, train=True)
            x = inputs(gen, case, dtype, device)
            upstream = randn(gen, *case["lead"], case["O"], dtype=dtype, device=device)
            check_gradients(kata, model, x, upstream)


@convention("float16 and bfloat16 work.", zh="半精度下可用")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in without_dropout(CASES.random(rng, 2)):
        with case.judged():
            check_forward(kata, build(gen, case, dtype), inputs(gen, case, dtype))


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """Outputs and gradients within float64's own tolerance (8 eps of float64 per unit of scale)."""
    for index, case in enumerate(without_dropout(CASES.cases(rng, 2))):
        with case.judged():
            model = build(gen, case, torch.float64, train=True)
            x = inputs(gen, case, torch.float64)
            check_forward(kata, model, x, float64_throughout=True)
            if index % 2 == 0:
                upstream = randn(gen, *case["lead"], case["O"], dtype=torch.float64)
                check_gradients(kata, model, x, upstream, float64_throughout=True)


@convention(
    "lora_A and lora_B have base.weight's dtype and device; the output has x's dtype and device.",
    zh="结果跟随 base 和输入所在的 device",
)
def test_results_follow_the_device_of_the_base_and_the_inputs(kata, other_device):
    """lora_A and lora_B made on the base's device (lora_B zero); the output on x's."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def made_on(device: str):
        gen = torch.Generator().manual_seed(0)
        model = build(gen, case, device=device)
        return model, inputs(gen, case, device=device)

    model, x = made_on("cpu")
    for_output = tolerance(torch.float32, output_scale(model.reference, x))

    def expected(device: str) -> dict:
        model, x = made_on(device)
        example = uniform_example(case, torch.float32, model.recipe["init_seed"]).to(device)
        zeros = torch.zeros(case["O"], case["r"], device=device)
        return {"lora_A": example, "lora_B": zeros, "output": model.reference.expected(x)}

    def run(device: str, check) -> None:
        model, x = made_on(device)
        text = pick(
            f"{model.name} around a base on {device}, called on x {describe(x)}",
            f"{model.name}（base 在 {device} 上），以 x {describe(x)} 调用",
        )
        with SPEC.diagnosing(lambda implementation: placed_on(implementation, model, x), case):
            check(text, placed_on(kata, model, x))

    def compare(got, want, *, call: str, what: str) -> None:
        if what == "lora_A":  # its own random draw: its kind only
            check_tensor_kind(got, want, call=call, what=what)
        else:
            assert_close(got, want, call=call, what=what, tolerance=EXACT if what == "lora_B" else for_output)

    judge_on_device(run, other_device, expected=expected, compare=compare)


def placed_on(implementation, model: Model, x) -> dict:
    got = placed(implementation, model.recipe, x)
    return {"lora_A": got["lora_A"], "lora_B": got["lora_B"], "output": got.get("output")}


@convention("x is never changed in place.", zh="不修改输入")
def test_does_not_modify_its_input(kata, rng, gen):
    """In eval() and in train() mode with dropout (no in-place dropout on x), and through a
    whole merge() and unmerge() story."""
    case = CASES.random(rng)[0] | {"p": 0.25}
    for train in (False, True):
        model = build(gen, case, train=train)
        x = inputs(gen, case)
        text = call_repr(model.name, x)

        def check(implementation, model=model, x=x, text=text) -> dict:
            got = run_forward(implementation, model, x)
            assert_inputs_unchanged(text, {"x": x}, {"x": got["x"]})
            return {}

        with case.judged(), SPEC.diagnosing(check, case):
            check(kata)
    model = build(gen, case)
    x = inputs(gen, case)
    new_B = randn(gen, case["O"], case["r"], std=case["r"] ** -0.5)
    text = pick(
        f"model = {model.name}: model(x) between merge() and unmerge() calls",
        f"model = {model.name}：在 merge() 和 unmerge() 调用之间的 model(x)",
    )

    def story(implementation) -> dict:
        trace = merge_story(implementation, model.recipe, x, new_B)
        assert_inputs_unchanged(text, {"x": x}, {"x": trace.get("x", x)})
        return {}

    with case.judged(), SPEC.diagnosing(story, case):
        story(kata)

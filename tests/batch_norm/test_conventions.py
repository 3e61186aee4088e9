"""batch_norm: the conventions (errors, buffers without autograd history, a new module's
state, half precision, the float64 rule, devices, the input left alone); the SPEC, scenarios,
references, tolerances and checks are in common.py."""

import torch
from torch import nn

from judge.language import pick, tr
from judge.testing.checks import Mismatch, assert_close, describe, judge_on_device
from judge.testing.diagnosis import diagnosing
from judge.testing.modules import module_repr
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention

from .common import (
    BUFFERS,
    CASES,
    EDGES,
    EVAL,
    EXACTLY,
    HALF,
    ONE_VALUE,
    SPEC,
    TRAIN,
    build,
    call_text,
    judge_story,
    make_script,
    mode_text,
    new_module,
    problem_text,
    reference_story,
    story,
    tolerance,
)


@convention(
    "training with one value per channel (n == 1, e.g. x of shape [1, C]) raises ValueError",
    zh="训练时每个通道只有一个值则抛出 ValueError",
)
def test_one_value_per_channel_raises_in_training_and_without_running_stats(kata, gen):
    """[1, C] in training raises; in eval with running stats it is normalised by them; in eval
    without running stats it raises too (fixed sizes: the verdict cannot depend on the seed)."""
    for case in (
        ONE_VALUE,
        ONE_VALUE | {"script": (EVAL,)},
        ONE_VALUE | {"script": (EVAL,), "track": False},
    ):
        with case.judged():
            judge_story(kata, gen, case, torch.float32)


@convention(
    "running_mean, running_var and num_batches_tracked are registered buffers (state_dict keys as PyTorch's), "
    "updated without autograd history (torch.no_grad() or .detach()): after a training call they have no grad_fn "
    "and do not require grad.",
    zh="运行统计量是注册的缓冲区，更新时不带 autograd 历史",
)
def test_the_buffers_are_registered_and_carry_no_autograd_history(kata, gen):
    """After every call: state_dict holds PyTorch's keys; each buffer is in the module's dtype
    (num_batches_tracked long), requires no grad and has no grad_fn. Fixed sizes (the first edge case)."""
    for module_dtype in (torch.float32, torch.float64):
        case = EDGES[0]
        recipe, reference, name = build(gen, case, module_dtype)
        script = make_script(gen, case, module_dtype)
        keys = sorted(reference.state_dict().keys())

        def judged(implementation) -> dict:
            trace = story(implementation, recipe, script)
            if "problem" in trace:
                raise AssertionError(problem_text(name, trace["problem"]))
            for number, ((mode, x, _), got) in enumerate(zip(script, trace["calls"])):
                text = call_text(name, number + 1, len(script), mode, x)
                if got["state_dict"] != keys:
                    raise AssertionError(
                        pick(
                            f"after {text}, state_dict() has the keys {got['state_dict']}; nn.BatchNorm's has {keys} "
                            "(register_buffer, not a plain attribute)",
                            f"{text} 之后，state_dict() 的键是 {got['state_dict']}；nn.BatchNorm 的是 {keys}"
                            "（用 register_buffer，而不是普通属性）",
                        )
                    )
                for buffer in BUFFERS:
                    value = got[buffer]
                    want = module_dtype if buffer != "num_batches_tracked" else torch.long
                    if not isinstance(value, torch.Tensor) or value.dtype != want:
                        shown = describe(value)
                        raise AssertionError(
                            pick(
                                f"after {text}, self.{buffer} is {shown}; expected a {want} buffer (the module's dtype)",
                                f"{text} 之后，self.{buffer} 是 {shown}；应为 {want} 的缓冲区（模块的 dtype）",
                            )
                        )
                    requires_grad, has_grad_fn = got[f"{buffer} history"]
                    if requires_grad or has_grad_fn:
                        raise AssertionError(
                            pick(
                                f"after {text}, self.{buffer} carries autograd history (requires_grad={requires_grad}, "
                                f"grad_fn {'set' if has_grad_fn else 'None'}): update the running statistics under "
                                "torch.no_grad() or from detached batch statistics, or every step keeps the previous "
                                "graphs alive",
                                f"{text} 之后，self.{buffer} 带有 autograd 历史（requires_grad={requires_grad}，grad_fn "
                                f"{'不是 None' if has_grad_fn else '为 None'}）：请在 torch.no_grad() 下、或用 detach 之后的批统计量"
                                "更新运行统计量，否则每一步都会让之前的计算图一直存活",
                            )
                        )
        with diagnosing(SPEC.kata, judged):
            judged(kata)


@convention(
    "a new module starts as PyTorch's: weight ones, bias zeros, running_mean zeros, running_var ones, "
    "num_batches_tracked tensor(0) (torch.long); None without affine or running stats.",
    zh="新模块的初始状态与 PyTorch 的一致",
)
def test_a_new_module_starts_as_pytorchs(kata, rng):
    C = rng.randint(2, 7)
    for keywords in ({}, {"affine": False}, {"track_running_stats": False}):
        pytorch = nn.BatchNorm1d(C, **keywords)
        built = module_repr("BatchNorm", num_features=C, **keywords).replace("num_features=", "")

        def judged(implementation, keywords=keywords, pytorch=pytorch, built=built) -> dict:
            found = new_module(implementation, [C], keywords)
            expected = sorted(name for name, _ in pytorch.named_parameters())
            if found["parameters"] != expected:
                raise AssertionError(
                    pick(
                        f"{built} has parameters {found['parameters']}; expected {expected}",
                        f"{built} 的参数是 {found['parameters']}；应为 {expected}",
                    )
                )
            for name in ("weight", "bias", *BUFFERS):
                kind, value = found[name]
                want = getattr(pytorch, name)
                if want is None:
                    ok = kind == "NoneType"
                else:
                    ok = (
                        value is not None
                        and value.dtype == want.dtype
                        and value.shape == want.shape
                        and torch.equal(value, want.detach())
                    )
                if not ok:
                    shown = "None" if want is None else f"{describe(want)} {want.detach().tolist()}"
                    got = kind if value is None else f"{describe(value)} {value.tolist()}"
                    raise AssertionError(
                        pick(
                            f"{built}.{name} starts as {got}; nn.BatchNorm's starts as {shown}",
                            f"{built}.{name} 的初始值是 {got}；nn.BatchNorm 的初始值是 {shown}",
                        )
                    )
            if found["state_dict"] != sorted(pytorch.state_dict().keys()):
                raise AssertionError(
                    pick(
                        f"{built}.state_dict() has the keys {found['state_dict']}; nn.BatchNorm's has "
                        f"{sorted(pytorch.state_dict().keys())}",
                        f"{built}.state_dict() 的键是 {found['state_dict']}；nn.BatchNorm 的是 "
                        f"{sorted(pytorch.state_dict().keys())}",
                    )
                )
            return {}

        with diagnosing(SPEC.kata, judged):
            judged(kata)


@convention(
    "float16 and bfloat16 inputs go through a float32 module (its parameters and buffers stay float32), "
    "computed in float32, the result cast back to x's dtype.",
    zh="半精度输入经过 float32 模块、以 float32 计算，结果转回原 dtype",
)
@dtypes(*HALF)
def test_half_precision_inputs_go_through_a_float32_module(kata, rng, gen, dtype):
    """Channel means of about 40 (a sum in half precision loses them); the buffers are compared
    as float32 values of float32's tolerance."""
    for case in (EDGES[0], *CASES.random(rng, 2)):
        with case.judged():
            judge_story(kata, gen, case, dtype, module_dtype=torch.float32, float64_throughout=True, offset=40.0)


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    for case in (EDGES[0], EDGES[4], *CASES.random(rng, 2)):
        with case.judged():
            judge_story(kata, gen, case, torch.float64, float64_throughout=True)


@convention("results follow the input's device (the module moved there with .to(device)).", zh="结果跟随输入所在的 device")
def test_results_follow_the_device_of_the_input(kata, other_device):
    """A training call then an eval call on `other_device`: the outputs and running_mean (fixed sizes)."""
    case = EDGES[0] | {"script": (TRAIN, EVAL)}

    def made(device):
        gen = torch.Generator().manual_seed(0)
        recipe, reference, name = build(gen, case, torch.float32, device)
        script = make_script(gen, case, torch.float32, device)
        return recipe, reference, name, script

    def expected(device) -> dict:
        _, reference, _, script = made(device)
        calls = reference_story(reference, script, torch.float32)
        return {
            "output": calls[1]["output"].to(device),
            "running_mean": calls[1]["running_mean"].to(device),
        }

    def run(device, check) -> None:
        recipe, _, name, script = made(device)
        text = f"{name}.to({device!r})" + "".join(f"{mode_text(mode)}({describe(x)})" for mode, x, _ in script)

        def replay(implementation) -> dict:
            trace = story(implementation, recipe, script, False)
            if "problem" in trace:
                raise AssertionError(problem_text(name, trace["problem"]))
            last = trace["calls"][-1]
            return {"output": last.get("output"), "running_mean": last.get("running_mean")}

        with diagnosing(SPEC.kata, replay, {}):
            check(text, replay(kata))

    def compare(got, want, *, call: str, what: str) -> None:
        assert_close(got, want, call=call, what=what, tolerance=tolerance(want))

    judge_on_device(run, other_device, expected=expected, compare=compare)


@convention("the input is never modified in place.", zh="不修改输入")
def test_does_not_modify_its_input(kata, rng, gen):
    """In each dtype, in training and in eval, x comes back as it was sent."""
    case = CASES.random(rng)[0] | {"script": (TRAIN, EVAL), "track": True}
    for dtype in (torch.float32, torch.float64, torch.float16):
        module_dtype = torch.float32 if dtype == torch.float16 else dtype
        recipe, _, name = build(gen, case, module_dtype)
        script = make_script(gen, case, dtype)

        def judged(implementation) -> dict:
            trace = story(implementation, recipe, script, False)
            if "problem" in trace:
                raise AssertionError(problem_text(name, trace["problem"]))
            for (mode, x, _), got in zip(script, trace["calls"]):
                after = got.get("x")
                if not isinstance(after, torch.Tensor) or not torch.equal(after, x):
                    raise Mismatch(
                        tr(
                            "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op",
                            call=f"{name}{mode_text(mode)}({describe(x)})",
                            name="x",
                        ),
                        what="x",
                        actual=after,
                        expected=x,
                        tolerance=EXACTLY,
                    )
            return {}

        with case.judged(), diagnosing(SPEC.kata, judged):
            judged(kata)

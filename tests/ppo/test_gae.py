"""ppo: gae against a plain Python loop over rows and steps in float64 (see common.py)."""

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, check_tensor_kind
from judge.testing.spec import dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    FULL,
    GAE_OUTPUTS,
    HALF,
    PPO,
    SPEC,
    assert_close,
    check_gae,
    gae_reference,
    gae_split,
    gae_tolerance,
    gae_with_inputs_requiring_grad,
    make_rollout,
)


@core(zh="在中途结束的回合上，gae 与 Python 循环一致")
@dtypes(*FULL)
def test_gae_matches_a_python_loop_on_episodes_that_end_mid_sequence(kata, rng, gen, dtype, device):
    """dones as bool and as 0/1 floats: several episode ends per row, at t = 0 and t = T - 1 included."""
    for case in CASES.cases(rng):
        with case.judged():
            for dones_as in ("bool", "float"):
                check_gae(kata, make_rollout(gen, case, dtype, device, dones_as=dones_as))


@core(zh="gae 的默认值为 gamma 0.99、lam 0.95")
def test_gae_defaults_are_gamma_0_99_and_lam_0_95(kata, rng, gen):
    for case in CASES.random(rng, 2):
        with case.judged():
            args = make_rollout(gen, case, torch.float64, dones_as=rng.choice(("bool", "float")))
            for key in ("gamma", "lam"):
                args.pop(key, None)
            check_gae(kata, args)


@convention(
    "float16 and bfloat16 inputs are computed in float32 and the results cast back to their dtype.",
    zh="半精度下 gae 用 float32 计算，再把结果转换回原 dtype",
)
@dtypes(*HALF)
def test_gae_in_half_precision_is_computed_in_float32_and_cast_back(kata, rng, gen, dtype):
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            check_gae(kata, make_rollout(gen, case, dtype, dones_as=("bool", "float")[index % 2]))


def graph_of(implementation, positional: tuple, keywords: dict, text: str) -> dict:
    """The scenario's observation as {what: value}: both results, and whether each records a graph."""
    got = gae_with_inputs_requiring_grad(implementation, positional, keywords)
    outputs = PPO.outputs_of("gae")(got["result"], text)
    return outputs | {
        f"whether {name} record a graph": got["graph"][i] is not None for i, name in enumerate(GAE_OUTPUTS)
    }


@convention(
    "no graph: advantages and returns are targets, not something to differentiate through.",
    zh="即使输入需要梯度，gae 也不记录计算图",
)
@dtypes(*FULL)
def test_gae_records_no_graph_even_when_its_inputs_require_grad(kata, rng, gen, dtype):
    """Advantages and returns are targets: with rewards, values and last_value requiring
    grad, both results must have requires_grad False (torch.no_grad() or .detach())."""
    for case in (CASES.edges[0], CASES.random(rng)[0]):
        with case.judged():
            args = make_rollout(gen, case, dtype, dones_as=rng.choice(("bool", "float")))
            want, scale = gae_reference(**args)
            positional, keywords = gae_split(args)
            text = PPO.text("gae", positional, keywords) + pick(" with inputs that require grad", "（输入需要梯度）")

            def replay(implementation, positional=positional, keywords=keywords, text=text) -> dict:
                return graph_of(implementation, positional, keywords, text)

            with SPEC.diagnosing(replay, {}):
                got = gae_with_inputs_requiring_grad(kata, positional, keywords)
                outputs = PPO.outputs_of("gae")(got["result"], text)
                for index, name in enumerate(GAE_OUTPUTS):
                    check_tensor_kind(outputs[name], want[name], call=text, what=name)
                    if got["graph"][index] is not None:
                        raise Mismatch(
                            pick(
                                f"{text} returned {name} that record an autograd graph "
                                f"(requires_grad=True, grad_fn={got['graph'][index]}): advantages and returns are "
                                "targets, computed without recording a graph (torch.no_grad() or .detach())",
                                f"{text} 返回的 {name} 记录了 autograd 计算图"
                                f"（requires_grad=True，grad_fn={got['graph'][index]}）：advantages 和 returns "
                                "是目标值，计算时不应记录计算图（torch.no_grad() 或 .detach()）",
                            ),
                            what=f"whether {name} record a graph",
                            actual=True,
                            expected=False,
                        )
                for name in GAE_OUTPUTS:
                    assert_close(outputs[name], want[name], call=text, what=name, tolerance=gae_tolerance(want, scale))

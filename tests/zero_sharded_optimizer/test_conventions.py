"""zero_sharded_optimizer, the conventions of its docstring: a generator of parameters, what
step() returns, a step() with no gradient at all. Each one story, in a world of 2."""

from judge.testing.spec import edge
from judge.testing.tiers import convention

from .common import SPEC, play, reference_trace
from .judging import check_returns, check_step, replay_of


@convention(
    "params may be any iterable torch.optim.Optimizer accepts, a generator such as model.parameters() "
    "included (read it once).",
    zh="params 可以是生成器（如 model.parameters()）",
)
def test_params_may_be_a_generator(kata, seed):
    case = edge("model.parameters()", "以生成器 model.parameters() 传入", world=2, model="toy", optimizer="AdamW", steps=2,
                params="generator")  # fmt: skip
    for case, story, traces in play(kata, [case], seed):
        reference, _, _ = reference_trace(story)
        for step in range(1, story["steps"] + 1):
            with case.judged(), SPEC.diagnosing(replay_of(story, step), sizes=case):
                check_step(story, traces, reference, step)


@convention(
    "step(closure) calls the closure once and returns its loss; step() returns None.",
    zh="step(closure) 只调用一次 closure 并返回它的 loss；step() 返回 None",
)
def test_step_returns_the_closures_loss_and_none_without_one(kata, seed):
    case = edge("step(closure) on odd steps", "奇数步用 step(closure)", world=2, model="toy", optimizer="SGD",
                steps=3, params="list", closure="alternate")  # fmt: skip
    for case, story, traces in play(kata, [case], seed):
        for step in range(1, story["steps"] + 1):
            with case.judged(), SPEC.diagnosing(replay_of(story, step), sizes=case):
                check_returns(story, traces, step)


@convention(
    "step() with no gradient at all (before the first backward, or every parameter frozen) changes nothing "
    "and raises nothing.",
    zh="没有任何梯度时 step() 什么也不改、也不报错",
)
def test_a_step_without_gradients_changes_nothing(kata, seed):
    case = edge("step() before the first backward", "第一次 backward 之前的 step()", world=2, model="toy",
                optimizer="AdamW", steps=1, params="two_groups", idle=True)  # fmt: skip
    for case, story, traces in play(kata, [case], seed):
        reference, _, _ = reference_trace(story)
        for step in (0, 1):
            with case.judged(), SPEC.diagnosing(replay_of(story, step), sizes=case):
                check_step(story, traces, reference, step)

"""lora: merge() and unmerge(), judged as one story (common.merge_story, one scenario that
plays it whole where the kata lives and returns its trace), every step against float64:
unmerging what was never merged changes nothing (exactly), merge() adds scaling * lora_B @
lora_A into base.weight, the output stays the formula's, merging again changes nothing
(exactly), a changed lora_B no longer changes the output (in train() mode), unmerge() restores
base.weight (up to rounding) and the formula again, unmerging twice changes nothing. The same
story's trace also says whether merge() and unmerge() recorded a graph on base.weight, and
whether the nn.Linear passed in is the one merge() changed (conventions)."""

from __future__ import annotations

import torch

from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, describe
from judge.testing.inputs import randn
from judge.testing.spec import dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    EXACT,
    FROZEN,
    FULL,
    SPEC,
    Model,
    build,
    inputs,
    merge_story,
    output_scale,
    refused,
    story_so_far,
    tolerance,
    weight_scale,
    without_dropout,
)

MERGE_HINTS = {
    "base.weight after unmerge() on a module never merged": "unmerge() on a module that is not merged must do "
    "nothing: remember whether the module is merged",
    "output before merge()": "before merging, forward is base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling",
    "base.weight after merge()": "merge() adds scaling * lora_B @ lora_A (shape [out_features, in_features]) "
    "into base.weight",
    "base.weight's graph after merge()": "merge() must record no graph: do it under torch.no_grad(), in place "
    "(no new tensor or Parameter in base.weight's place), so base.weight stays a frozen leaf",
    "the nn.Linear passed in: its weight after merge() less model.base.weight": "keep the very nn.Linear passed "
    "in (self.base = base), not a copy: merge() changes its weight in place, where its owner sees it",
    "output after merge()": "once merged, forward is base(x) alone: the update is already inside base.weight, "
    "adding the branch again counts it twice",
    "base.weight after merge() twice": "merge() on a merged module must do nothing: remember that it is merged",
    "output after merge() twice": "merging twice must leave the module as after one merge()",
    "output in train() after merge() and a new lora_B": "once merged, forward is base(x) alone, in train() mode "
    "too: lora_B no longer takes part (and no dropout applies)",
    "base.weight after unmerge()": "unmerge() subtracts the same scaling * lora_B @ lora_A that merge() added",
    "base.weight's graph after unmerge()": "unmerge() must record no graph: do it under torch.no_grad(), in place "
    "(no new tensor or Parameter in base.weight's place)",
    "output after unmerge()": "after unmerge(), forward adds the low-rank branch again",
    "base.weight after unmerge() twice": "unmerge() on a module that is not merged must do nothing",
}
MERGE_HINTS_ZH = {
    "base.weight after unmerge() on a module never merged": "对未 merge 的模块调用 unmerge() 必须什么都不做："
    "记住模块是否已经 merge",
    "output before merge()": "merge 之前，forward 是 base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling",
    "base.weight after merge()": "merge() 把 scaling * lora_B @ lora_A（形状 [out_features, in_features]）"
    "加进 base.weight",
    "base.weight's graph after merge()": "merge() 不能记录计算图：在 torch.no_grad() 下原地完成"
    "（不要用新的张量或 Parameter 顶替 base.weight），让 base.weight 仍是冻结的叶子",
    "the nn.Linear passed in: its weight after merge() less model.base.weight": "保留传入的那个 nn.Linear 本身"
    "（self.base = base），不要复制：merge() 原地修改它的权重，它的持有者才能看到",
    "output after merge()": "merge 之后，forward 只有 base(x)：更新已经在 base.weight 里，再加一次低秩分支就算了两遍",
    "base.weight after merge() twice": "对已 merge 的模块调用 merge() 必须什么都不做：记住它已经 merge 过",
    "output after merge() twice": "merge 两次后，模块必须与 merge 一次后相同",
    "output in train() after merge() and a new lora_B": "merge 之后，forward 只有 base(x)，train() 模式下也一样："
    "lora_B 不再参与（也不应用 dropout）",
    "base.weight after unmerge()": "unmerge() 减去 merge() 加上的同一个 scaling * lora_B @ lora_A",
    "base.weight's graph after unmerge()": "unmerge() 不能记录计算图：在 torch.no_grad() 下原地完成"
    "（不要用新的张量或 Parameter 顶替 base.weight）",
    "output after unmerge()": "unmerge() 之后，forward 重新加上低秩分支",
    "base.weight after unmerge() twice": "对未 merge 的模块调用 unmerge() 必须什么都不做",
}


def story(gen, case, dtype=torch.float32, device="cpu") -> tuple:
    """(the model, x, the new lora_B the story sets while merged)."""
    model = build(gen, case, dtype, device)
    x = inputs(gen, case, dtype, device)
    new_B = randn(gen, case["O"], case["r"], dtype=dtype, device=device, std=case["r"] ** -0.5)
    return model, x, new_B


def played(implementation, model: Model, x, new_B) -> dict:
    return refused(model, merge_story(implementation, model.recipe, x, new_B))


def judge_story(kata, model: Model, x, new_B, wants: dict) -> None:
    """Each step's observation in `wants` ({what: (expected, tolerance)}, or a str, compared
    exactly), in the story's order, inside a diagnosis that replays the same story on each known
    slip and takes the same step of its trace."""
    with SPEC.diagnosing(lambda implementation: played(implementation, model, x, new_B), model.case):
        seen = played(kata, model, x, new_B)
        for what, want in wants.items():
            if what not in seen:
                raise Mismatch(
                    pick(
                        f"model = {model.name}, x = {describe(x)}: after {story_so_far(what)}: {seen['raised']}. "
                        "merge() and unmerge() change base.weight in place under torch.no_grad()",
                        f"model = {model.name}，x = {describe(x)}：经过 {story_so_far(what)} 之后：{seen['raised']}。"
                        "merge() 和 unmerge() 应在 torch.no_grad() 下原地修改 base.weight",
                    ),
                    what="raised",
                    actual=seen["raised"],
                    expected=None,
                )
            if isinstance(want, str):
                if seen[what] != want:
                    raise Mismatch(
                        pick(
                            f"model = {model.name}, after {story_so_far(what)}, base.weight has {seen[what]}; "
                            f"expected {want}. {MERGE_HINTS[what]}",
                            f"model = {model.name}，经过 {story_so_far(what)} 之后，base.weight 的状态是 {seen[what]}；"
                            f"应为 {want}。{MERGE_HINTS_ZH[what]}",
                        ),
                        what=what,
                        actual=seen[what],
                        expected=want,
                    )
                continue
            expected, allowed = want(seen) if callable(want) else want
            text = pick(
                f"model = {model.name}, x = {describe(x)}, after {story_so_far(what)},",
                f"model = {model.name}，x = {describe(x)}，经过 {story_so_far(what)} 之后",
            )
            hint = pick(MERGE_HINTS[what], MERGE_HINTS_ZH[what])
            assert_close(seen[what], expected, call=text, what=what, tolerance=allowed, hint=hint)


def merged_weight(model: Model) -> torch.Tensor:
    return model.reference.merged_weight().to(dtype=model.dtype, device=model.device)


@core(zh="merge() 把更新并入 base.weight，unmerge() 再把它取出")
@dtypes(*FULL)
def test_merge_folds_the_update_into_base_weight_and_unmerge_takes_it_out(kata, rng, gen, dtype, device):
    """Each step of the story against float64: weights and outputs within the tolerance,
    merging or unmerging twice exactly a no-op."""
    for case in without_dropout(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            model, x, new_B = story(gen, case, dtype, device)
            reference = model.reference
            output = reference.expected(x)
            for_output = tolerance(dtype, output_scale(reference, x))
            for_weight = tolerance(dtype, weight_scale(reference))
            restored = reference.base.weight.detach().to(dtype=dtype, device=device)
            wants = {
                "base.weight after unmerge() on a module never merged": lambda seen: (
                    seen["base.weight as loaded"],
                    EXACT,
                ),
                "output before merge()": (output, for_output),
                "base.weight after merge()": (merged_weight(model), for_weight),
                "output after merge()": (output, for_output),
                "base.weight after merge() twice": lambda seen: (seen["base.weight after merge()"], EXACT),
                "output after merge() twice": (output, for_output),
                "output in train() after merge() and a new lora_B": (output, for_output),
                "base.weight after unmerge()": (restored, for_weight),
                "output after unmerge()": (output, for_output),
                "base.weight after unmerge() twice": lambda seen: (seen["base.weight after unmerge()"], EXACT),
            }
            judge_story(kata, model, x, new_B, wants)


@convention(
    "merge() and unmerge() record no graph: base.weight stays a leaf with requires_grad=False.",
    zh="merge() 和 unmerge() 不记录计算图",
)
def test_merge_and_unmerge_record_no_graph(kata, rng, gen):
    """After merge() and after unmerge(), base.weight has requires_grad=False and no grad_fn."""
    for case in without_dropout(CASES.cases(rng, 1)):
        with case.judged():
            model, x, new_B = story(gen, case)
            wants = {"base.weight's graph after merge()": FROZEN, "base.weight's graph after unmerge()": FROZEN}
            judge_story(kata, model, x, new_B, wants)


@convention(
    "self.base is the very nn.Linear passed in, not a copy (merge() changes its weight in place).",
    zh="保留传入的那个 nn.Linear 本身",
)
def test_keeps_the_very_nn_linear_it_is_given(kata, rng, gen):
    """By value: after merge(), the nn.Linear passed in holds exactly module.base.weight (the
    merged weight); and by the kata's word: module.base is that nn.Linear."""
    for case in without_dropout(CASES.random(rng, 2)):
        with case.judged():
            model, x, new_B = story(gen, case)
            zeros = torch.zeros(case["O"], case["I"])
            judge_story(
                kata,
                model,
                x,
                new_B,
                {"the nn.Linear passed in: its weight after merge() less model.base.weight": (zeros, EXACT)},
            )

            def replay(implementation, model=model, x=x, new_B=new_B) -> dict:
                return played(implementation, model, x, new_B)

            with SPEC.diagnosing(replay, case):
                seen = replay(kata)
                if seen["keeps base"] is not True:
                    raise Mismatch(
                        pick(
                            f"{model.name}.base is not the nn.Linear passed in: keep the very module (self.base = "
                            "base), not a copy: merge() changes its weight in place",
                            f"{model.name}.base 不是传入的那个 nn.Linear：请保留这个模块本身（self.base = base），"
                            "不要复制：merge() 会原地修改它的权重",
                        ),
                        what="keeps base",
                        actual=seen["keeps base"],
                        expected=True,
                    )

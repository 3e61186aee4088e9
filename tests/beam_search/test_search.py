"""beam_search: judged against a float64 rewrite of HF's _beam_search on toy models (see
common.py), then by two properties (one beam is greedy; without pruning every hypothesis
comes back), then by its conventions."""

import functools

import torch

from judge.language import pick
from judge.testing.checks import Mismatch
from judge.testing.scenarios import outcome, scenario
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention, core

from .common import (
    FLOAT64_THROUGHOUT,
    PLAIN,
    SPEC,
    call_text,
    drawn,
    every_hypothesis,
    greedy,
    judge_search,
    search_sizes,
    searched,
    settings_of,
    toy_logprobs,
)

TOLERANCE = SPEC.tolerance(torch.float32)  # the core tier's, for both models (FLOAT64_RULE)


@core(zh="与 Hugging Face 的 _beam_search 一致（float64 参考）")
@dtypes(torch.float64, torch.float32)
def test_matches_hugging_faces_beam_search(kata, rng, dtype):
    """Every edge case, then random settings, against the reference. The edge cases run in both
    dtypes: each run draws its own model (a new seed), so a slip that shows on most models of an
    edge case gets a second chance to show."""
    for case in SPEC.cases.cases(rng):
        with case.judged():
            model, prompt, expected = drawn(rng.randrange(2**31), case, dtype)
            judge_search(kata, model, prompt, settings_of(case), expected, sizes=search_sizes(case),
                         tolerance=TOLERANCE)


@core(zh="一条束且 early_stopping=True 时就是贪心解码")
def test_one_beam_is_greedy_decoding(kata, rng):
    """num_beams=1, early_stopping=True: the argmax at each step until EOS or the length,
    checked against a greedy decoder (not the beam reference)."""
    for n in range(3):
        V = rng.randrange(3, 10)
        case = {"P": rng.randrange(1, 4), "V": V, "K": 1, "T": rng.randrange(2, 8), "eos": rng.randrange(V),
                "eos_bias": [rng.choice([0.0, 1.0, 2.0])], "lp": rng.choice([1.0, 0.0, 2.0]), "early": True}
        model, prompt, expected = drawn(
            rng.randrange(2**31), case, torch.float64,
            expected=lambda m, p, c=case: greedy(m, p, c["T"], c["eos"], c["lp"]),
        )
        judge_search(kata, model, prompt, settings_of(case), expected, sizes=search_sizes(case), tolerance=TOLERANCE)


@core(zh="不剪枝时返回全部 15 个假设及其精确的和")
def test_without_pruning_all_15_hypotheses_come_back_with_their_sums(kata, rng):
    """V = 3 (one of them EOS), max_new_tokens = 3: 1 + 2 + 12 = 15 complete hypotheses;
    num_beams = 15, early_stopping="never", length_penalty 0 must return them all, best first,
    with their plain sums (enumerated here, not searched)."""
    eos = rng.randrange(3)
    case = {"P": 2, "V": 3, "K": 15, "T": 3, "eos": eos, "eos_bias": [0.0], "lp": 0.0, "early": "never"}
    model, prompt, expected = drawn(
        rng.randrange(2**31), case, torch.float64, expected=lambda m, p: every_hypothesis(m, p, 3, eos)
    )
    assert len(expected[0]) == 15
    judge_search(kata, model, prompt, settings_of(case), expected, sizes=search_sizes(case), tolerance=TOLERANCE)


# --------------------------------------------------------------------------- conventions

BAD_SETTINGS = (  # (what is wrong, prompt, settings changed)
    ("num_beams = 0", [1, 2], {"num_beams": 0}),
    ("max_new_tokens = 0", [1, 2], {"max_new_tokens": 0}),
    ("early_stopping = 'always'", [1, 2], {"early_stopping": "always"}),
    ("a 2-D prompt [1, 2]", [[1, 2]], {}),
    ("an empty prompt", [], {}),
)
GOOD = {"num_beams": 2, "max_new_tokens": 3, "eos_token_id": 0, "length_penalty": 1.0, "early_stopping": True}
MODEL = {"seed": 5, "V": 6, "eos": 0, "eos_bias": [0.0], "prompt_len": 2}


@scenario
def refused(kata, prompt, settings: dict) -> str:
    step = functools.partial(toy_logprobs, **MODEL)
    return outcome(lambda: kata.beam_search(step, prompt, **settings))


@convention(
    'bad settings raise ValueError: num_beams < 1, max_new_tokens < 1, early_stopping not True, False or "never", '
    "a prompt that is not 1-D with at least one token.",
    zh="不合法的设置抛出 ValueError",
)
def test_bad_settings_raise_value_error(kata):
    for what, prompt, change in BAD_SETTINGS:
        tokens, settings = torch.tensor(prompt, dtype=torch.long), {**GOOD, **change}

        def replay(implementation, tokens=tokens, settings=settings) -> dict:
            return {"outcome": refused(implementation, tokens, settings)}

        with SPEC.diagnosing(replay, {}):
            did = replay(kata)["outcome"]
            if did != "raised ValueError":
                shown = pick(did, "正常返回" if did == "returned normally" else did.replace("raised", "抛出了", 1))
                raise Mismatch(
                    pick(f"{call_text(tokens, settings)} {shown}; expected ValueError ({what})",
                         f"{call_text(tokens, settings)} {shown}；应抛出 ValueError（{what}）"),
                    what="outcome", actual=did, expected="raised ValueError",
                )


def _tight(kata, rng, dtype):
    """Every edge case on `dtype` models, scores held to float64's tolerance."""
    for case in SPEC.cases.edges:
        with case.judged():
            model, prompt, expected = drawn(rng.randrange(2**31), case, dtype)
            judge_search(kata, model, prompt, settings_of(case), expected, sizes=search_sizes(case),
                         tolerance=FLOAT64_THROUGHOUT)


@convention("scores are summed in float64, whatever dtype step_logprobs returns.", zh="分数总是用 float64 累加")
def test_scores_are_summed_in_float64_for_a_float32_model(kata, rng):
    _tight(kata, rng, torch.float32)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_is_computed_in_float64_throughout(kata, rng):
    _tight(kata, rng, torch.float64)


@convention("the result is plain Python: lists of ints and floats, no tensors.", zh="结果是纯 Python：int 与 float 的列表")
def test_the_result_is_plain_python(kata):
    prompt = torch.tensor([3, 1])

    def replay(implementation) -> dict:
        return {"form": searched(implementation, MODEL, prompt, GOOD)["form"]}

    with SPEC.diagnosing(replay, {}):
        got = replay(kata)["form"]
        if got not in PLAIN:
            raise Mismatch(
                pick(
                    f"{call_text(prompt, GOOD)} returned {got}; expected tuple(list[list[int]], list[float]): "
                    "convert with .tolist() / int() / float()",
                    f"{call_text(prompt, GOOD)} 返回了 {got}；应为 tuple(list[list[int]], list[float])："
                    "用 .tolist() / int() / float() 转换",
                ),
                what="form", actual=got, expected="tuple(list[list[int]], list[float])",
            )


@convention("prompt is never changed in place.", zh="prompt 永远不会被原地修改")
def test_prompt_is_left_alone(kata):
    prompt = torch.tensor([3, 1])
    after = searched(kata, MODEL, prompt.clone(), GOOD)["prompt"]
    if not torch.equal(after, prompt):
        raise AssertionError(pick(f"{call_text(prompt, GOOD)} changed prompt in place: {prompt.tolist()} -> "
                                  f"{after.tolist()}; work on a copy",
                                  f"{call_text(prompt, GOOD)} 原地修改了 prompt：{prompt.tolist()} -> "
                                  f"{after.tolist()}；请在副本上操作"))

"""causal_lm: the parameters, one full pass (the logits, the loss and the cache it returns),
the loss's gradients and causality; each call a `forwarding` or `differentiated` scenario
(see common.py)."""

import torch

from judge.language import pick
from judge.testing.checks import check_tensor_kind
from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    FULL,
    SPEC,
    TOLERANCES,
    aligned_targets,
    build,
    one_thread,  # noqa: F401 - an autouse fixture
    token_ids,
)
from .judging import check_full_pass, check_gradients, forward_text, play, step


@core(zh="lm_head 与 token 嵌入绑定，参数与 GPT-2 的一致")
def test_lm_head_is_tied_to_the_token_embedding_and_the_parameters_are_gpt2s(kata, rng, gen):
    """lm_head.weight IS token_embedding.weight; the names and shapes the docstring lists,
    with d_ff given and left to its default (4 * d_model)."""
    case = CASES.random(rng)[0]
    with case.judged():
        for defaults in (False, True):
            model = build(gen, case, defaults=defaults)
            check_full_pass(kata, model, token_ids(gen, case["B"], case["T"], case["V"]))


@core(zh="一次完整前向的 logits 和缓存与 float64 参考一致")
@dtypes(*FULL)
def test_logits_and_cache_of_a_full_pass_match_the_float64_reference(kata, rng, gen, dtype, device):
    """cache=None, targets=None: logits [B, T, V], loss None, and the cache of the T tokens."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, case, dtype, device)
            check_full_pass(kata, model, token_ids(gen, case["B"], case["T"], case["V"], device))


@core(zh="loss 是 logits 的交叉熵，忽略 -100")
@dtypes(*FULL)
def test_loss_is_the_cross_entropy_of_the_logits_with_minus_100_ignored(kata, rng, gen, dtype):
    """targets aligned with input_ids (never shifted inside forward), about a third -100."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, case, dtype)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_full_pass(kata, model, ids, aligned_targets(gen, ids, case["V"]))


@core(zh="loss 像参考一样反向传播到每个参数")
def test_the_loss_backpropagates_into_every_parameter_as_the_reference(kata, rng, gen):
    """float64: the gradient of the loss for every parameter (the tied weight gets both its
    uses) against autograd through the reference."""
    for case in [CASES.edges[0], *CASES.random(rng)]:
        with case.judged():
            model = build(gen, case, torch.float64)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_gradients(kata, model, ids, aligned_targets(gen, ids, case["V"]))


@core(zh="后面的 token 不改变前面的 logits")
def test_later_tokens_do_not_change_earlier_logits(kata, rng, gen):
    """Causality on its own: change every token from position t on; the logits before t stay.
    Both passes are one `forwarding` story."""
    case = CASES.random(rng)[0]
    model = build(gen, case)
    B, T, V = case["B"], case["T"], case["V"]
    ids = token_ids(gen, B, T, V)
    t = rng.randrange(1, T)
    changed = ids.clone()
    changed[:, t:] = (ids[:, t:] + torch.randint(1, V, ids[:, t:].shape, generator=gen)) % V
    calls = [{"ids": ids}, {"ids": changed}]
    text = forward_text(model, ids)
    fits = pick(f"{T} tokens fit in max_len={case['M']}", f"{T} 个 token 放得进 max_len={case['M']}")

    def check(implementation) -> dict:
        trace = play(implementation, model, calls)
        before, after = (step(trace, index, text, fits=fits)["logits"] for index in (0, 1))
        for logits in (before, after):
            check_tensor_kind(logits, torch.empty(B, T, V), call=text, what="logits")
        moved = (before[:, :t] - after[:, :t]).abs().amax(dim=(0, 2)) > TOLERANCES[torch.float32]["atol"]
        if moved.any():
            p = int(moved.nonzero()[0])
            raise AssertionError(
                pick(
                    f"{text}: changing the tokens at positions {t}..{T - 1} only changed the logits at position "
                    f"{p} < {t}; position p may attend to positions 0..p only (block key j > query i)",
                    f"{text}：只改动了位置 {t}..{T - 1} 的 token，却改变了位置 {p} < {t} 的 logits；"
                    "位置 p 只能关注位置 0..p（屏蔽键 j > 查询 i）",
                )
            )
        return {}

    with case.judged(), SPEC.diagnosing(check, case):
        check(kata)

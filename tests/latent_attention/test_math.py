"""latent_attention: the math. A full pass against the float64 reference, its cache included
(kv_lora_rank + qk_rope_head_dim numbers per token); the same sequence decoded in chunks; the
gradient of x. Each story is one scenario (see common.py)."""

import torch

from judge.language import tr
from judge.testing import modules
from judge.testing.checks import assert_close, call_repr
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    FULL,
    MLA,
    SPEC,
    Story,
    build,
    check_story,
    sequence,
)


@core(zh="完整前向与参考一致，缓存是归一化的潜在向量和旋转过的 rope 键")
@dtypes(*FULL)
def test_a_full_pass_matches_and_caches_the_normalized_latent_and_the_rotated_rope_key(kata, rng, gen, dtype, device):
    """cache=None: positions 0..N-1, causal; the cache returned is [B, N, r] and [B, N, p]."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device)
            x = sequence(gen, case, dtype, device)
            check_story(kata, Story(built, x, case["chunks"]), calls=False)


@core(zh="分块解码（如 3 + 1 + 4）与一次完整前向给出相同的行和缓存")
@dtypes(*FULL)
def test_decoding_in_chunks_gives_the_rows_and_the_cache_of_one_full_pass(kata, rng, gen, dtype, device):
    """Each call given the cache the previous one returned: new token i, at position S0 + i,
    sees every cached token and the new ones up to itself; the cache grows by each chunk."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device)
            x = sequence(gen, case, dtype, device)
            check_story(kata, Story(built, x, case["chunks"]), full=False)


@core(zh="长度为 0 的缓存与 cache=None 一样，从位置 0 开始")
def test_a_cache_of_length_zero_starts_at_position_zero(kata, rng, gen):
    """The first call gets (zeros [B, 0, r], zeros [B, 0, p]) instead of None."""
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, rng, case)
            x = sequence(gen, case)
            check_story(kata, Story(built, x, case["chunks"], empty_first=True), full=False)


@core(zh="有 DeepSeek-V3 的各个子模块，按名称加载权重")
def test_has_the_submodules_of_deepseek_v3_attention_with_and_without_query_compression(kata, rng, gen):
    """q_proj alone when q_lora_rank is None; q_a_proj, q_a_layernorm and q_b_proj otherwise."""
    case = CASES.random(rng, 1)[0]
    with case.judged():
        for q in (0, case["q"] or 6):
            built = build(gen, rng, case | {"q": q})
            modules.call(MLA, kata, built, {"x": sequence(gen, case)})


@core(zh="梯度经 autograd 回传到 x，与参考一致")
def test_gradients_flow_back_to_x_like_the_reference(kata, rng, gen):
    """float64 gradients of (y * upstream).sum() through the full pass, judged with float32's
    tolerance (a float32 step inside float64 is the float64 rule's business, not autograd's)."""
    case = CASES.random(rng, 1)[0]
    with case.judged():
        built = build(gen, rng, case, torch.float64)
        x = sequence(gen, case, torch.float64)
        upstream = randn(gen, case["B"], case["N"], case["D"], dtype=torch.float64)
        twin = x.clone().requires_grad_()
        (built.reference(twin)["output"] * upstream).sum().backward()
        story = Story(built, x, case["chunks"])
        text = call_repr(built.name, x) + ".backward"

        def learner(implementation) -> dict:
            got = story.run(implementation, upstream)
            if got.get("gradient") is None:
                raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text, name="x"))
            return {"the gradient of `x`": got["gradient"]}

        with diagnosing(SPEC.kata, learner, case):
            got = learner(kata)["the gradient of `x`"]
            assert_close(got, twin.grad, call=text, what="the gradient of `x`", tolerance=SPEC.tolerance(torch.float32))

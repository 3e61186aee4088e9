"""latent_attention: the conventions of its stub: an odd rope size refused, half precision, the
float64 rule, devices, inputs (x and the cache passed in) left alone."""

import random

import torch

from judge.language import pick, tr
from judge.testing import modules
from judge.testing.checks import Mismatch, judge_on_device
from judge.testing.diagnosis import diagnosing
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention

from .common import CASES, HALF, MLA, SPEC, TOLERANCES, Story, build, check_story, judge_story, quick_close, sequence


@convention("raise ValueError when qk_rope_head_dim is odd.", zh="qk_rope_head_dim 为奇数时抛出 ValueError")
def test_an_odd_rope_head_dim_raises_value_error(kata, rng):
    p = rng.choice([1, 3, 5])
    keywords = {"kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": p, "v_head_dim": 3}
    modules.check_raises(
        MLA,
        kata,
        {"d_model": 16, "num_heads": 2},
        keywords,
        expected=ValueError,
        reason=pick(f"qk_rope_head_dim={p} is odd: RoPE rotates pairs", f"qk_rope_head_dim={p} 是奇数：RoPE 成对旋转"),
    )


@convention(
    "float16 and bfloat16 work (the RoPE angles computed in float32 or better; a blocked score -inf",
    zh="能以半精度解码",
)
@dtypes(*HALF)
def test_decodes_in_half_precision(kata, rng, gen, dtype):
    """A full pass and a chunked decoding, the cache included."""
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, rng, case, dtype)
            check_story(kata, Story(built, sequence(gen, case, dtype), case["chunks"]))


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """float64's own tolerance, plus 6e-7 per position for RoPE angles accurate to float32."""
    for case in CASES.cases(rng, 2)[:1] + CASES.random(rng, 1):
        with case.judged():
            built = build(gen, rng, case, torch.float64)
            x = sequence(gen, case, torch.float64)
            check_story(kata, Story(built, x, case["chunks"]), float64_throughout=True)


@convention("x and the cache passed in are never changed in place.", zh="不修改输入 x 和传入的缓存")
def test_does_not_modify_x_or_the_cache_it_is_given(kata, rng, gen):
    """Checked by value on each chunk and on the cache each call was given, as the call left them."""
    case = CASES.random(rng, 1)[0]
    with case.judged():
        built = build(gen, rng, case)
        story = Story(built, sequence(gen, case), case["chunks"])

        def judge(text, got, span) -> None:
            if span is None:
                return
            a, b = span
            sent = {"x": story.x[:, a:b]}
            if got["cache given"] is not None:
                sent |= {"cache[0]": got["cache given"][0], "cache[1]": got["cache given"][1]}
            came = {"x": got["x"]} | (
                {} if got["cache after"] is None else {"cache[0]": got["cache after"][0], "cache[1]": got["cache after"][1]}
            )
            for name, before in sent.items():
                after = came[name]
                if not (isinstance(after, torch.Tensor) and after.shape == before.shape and torch.equal(after, before)):
                    raise Mismatch(
                        tr(
                            "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op",
                            call=text,
                            name=name,
                        ),
                        what=name,
                        actual=after,
                        expected=before,
                    )

        judge_story(kata, story, judge)


@convention(
    "results follow x's device (the causal mask and the RoPE angles made inside forward too).",
    zh="结果位于输入所在的设备上",
)
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """A full pass then a chunked decoding on the other device (the first edge case, fixed draws):
    on a GPU every value; on "meta", the kind of every output and cache."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def story_on(where: str) -> Story:
        gen, rng = torch.Generator().manual_seed(0), random.Random(0)
        built = build(gen, rng, case, device=where)
        return Story(built, sequence(gen, case, device=where), case["chunks"])

    def flat(story: Story, trace: dict) -> dict:
        out = {}
        for number, (_, got, _) in enumerate(story.steps(trace)):
            for what in ("output", "latent cache", "rope key cache"):
                out[f"{what} of call {number}"] = got[what]
        return out

    def expected(where: str) -> dict:
        story = story_on(where)
        out = {}
        for number, (a, b) in enumerate([(0, story.x.size(1)), *story.spans]):
            rows = {"output": story.want["output"][:, a:b]}
            rows |= {what: story.want[what][:, :b] for what in ("latent cache", "rope key cache")}
            for what, want in rows.items():
                out[f"{what} of call {number}"] = want.detach().to(dtype=torch.float32, device=where)
        return out

    def run(where: str, check) -> None:
        story = story_on(where)

        def replay(implementation) -> dict:
            return flat(story, story.run(implementation))

        with diagnosing(SPEC.kata, replay, case):
            check(f"{story.built.name} decoding {list(case['chunks'])} tokens per call", replay(kata))

    def compare(got, want, *, call: str, what: str) -> None:
        quick_close(got, want, call=call, what=what, tolerance=TOLERANCES[want.dtype])

    judge_on_device(run, other_device, expected=expected, compare=compare)

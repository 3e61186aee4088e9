"""kv_cache: CachedSelfAttention, without a cache and decoding through its KVCache, each
decoding story one scenario returning its trace (see common.py): every call's output against
the rows of one causal pass over the whole sequence, the cache's length and contents after it."""

import torch

from judge.language import pick
from judge.testing import modules
from judge.testing.spec import FLOAT64_RULE, dtypes
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    FULL,
    HALF,
    KVC,
    SPEC,  # noqa: F401 - the kata fixture loads the kata by its SPEC
    build,
    prefill_then_one_at_a_time,
    random_chunks,
    sequence,
)
from .stories import check_buffers_kept, check_decoding, check_unchanged, judge_decoding, judge_decoding_on_device


@core(zh="不带缓存的完整前向是带 RoPE 的因果分组查询注意力")
@dtypes(*FULL)
def test_a_full_pass_without_a_cache_is_causal_grouped_query_attention_with_rope(kata, rng, gen, dtype, device):
    """cache=None: positions 0..T-1, query i sees keys 0..i."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, rng, case, dtype, device)
            modules.check(KVC, kata, model.built, {"x": sequence(gen, case, dtype, device)})


@core(zh="先预填充、再逐个 token 解码，与一次完整前向一致")
@dtypes(*FULL)
def test_prefill_then_one_token_at_a_time_matches_one_full_pass(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, rng, case, dtype, device)
            check_decoding(kata, model, [sequence(gen, case, dtype, device)], [prefill_then_one_at_a_time(case)])


@core(zh="按随机大小分块解码，与一次完整前向一致")
@dtypes(*FULL)
def test_chunks_of_random_sizes_match_one_full_pass(kata, rng, gen, dtype, device):
    """Several new tokens after held ones: new token i sees every held token and the new
    ones up to itself (a bottom-right aligned causal mask)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(gen, rng, case, dtype, device)
            check_decoding(kata, model, [sequence(gen, case, dtype, device)], [random_chunks(rng, case)])


@core(zh="缓存中存的是按各自位置旋转过的键，以及值")
def test_the_cache_holds_keys_rotated_at_their_positions_and_the_values(kata, rng, gen):
    """After every call, the buffers' first positions hold the reference's rotated keys and its values."""
    for case in CASES.cases(rng):
        with case.judged():
            model = build(gen, rng, case)
            x = sequence(gen, case, torch.float32)
            check_decoding(kata, model, [x], [random_chunks(rng, case)], contents=True)


@core(zh="reset 之后缓存从位置 0 开始解码新序列")
def test_after_reset_the_cache_decodes_a_new_sequence_from_position_zero(kata, rng, gen):
    """One cache serves two sequences in turn, reset() between them."""
    for case in CASES.random(rng, 2):
        with case.judged():
            model = build(gen, rng, case)
            sequences = [sequence(gen, case, torch.float32) for _ in range(2)]
            schedules = [random_chunks(rng, case), prefill_then_one_at_a_time(case)]
            check_decoding(kata, model, sequences, schedules, contents=True)


@core(zh="有四个投影层，只在要求时带偏置")
def test_has_the_four_projections_with_a_bias_only_when_asked(kata, rng, gen):
    """q_proj, k_proj, v_proj, o_proj, nn.Linear layout; k and v project to the kv heads only."""
    case = CASES.random(rng)[0]
    with case.judged():
        for bias in (False, True):
            model = build(gen, rng, case, bias=bias)
            modules.call(KVC, kata, model.built, {"x": sequence(gen, case, torch.float32)})


@convention("float16 and bfloat16 work: decoding in them matches", zh="能以半精度解码")
@dtypes(*HALF)
def test_decodes_in_half_precision(kata, rng, gen, dtype):
    """A blocked score must become -inf (or the dtype's lowest): -1e9 does not fit in float16."""
    for case in CASES.random(rng, 2):
        with case.judged():
            model = build(gen, rng, case, dtype)
            x = sequence(gen, case, dtype)
            check_decoding(kata, model, [x], [random_chunks(rng, case)], contents=True)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """A full pass and a decoding, the cache's contents included, with float64's own tolerance."""
    for case in CASES.cases(rng, 2):
        with case.judged():
            model = build(gen, rng, case, torch.float64)
            x = sequence(gen, case, torch.float64)
            modules.check(KVC, kata, model.built, {"x": x}, float64_throughout=True)
            check_decoding(kata, model, [x], [random_chunks(rng, case)], contents=True, float64_throughout=True)


@convention(
    "raise ValueError unless embed_dim % num_heads == 0, num_heads % num_kv_heads == 0 and the head size",
    zh="尺寸无法整除时抛出 ValueError",
)
def test_sizes_that_do_not_split_raise_value_error(kata, rng):
    """embed_dim not divisible by num_heads, num_heads not divisible by num_kv_heads, an odd head size."""
    H = rng.choice([4, 6])
    hs = rng.choice([2, 4, 6])
    attempts = [
        (
            (H * hs + rng.randint(1, H - 1), H, H // 2),
            pick(f"embed_dim is not divisible by num_heads={H}", f"embed_dim 不能被 num_heads={H} 整除"),
        ),
        (
            (H * hs, H, rng.choice([n for n in range(2, H) if H % n])),
            pick(f"num_heads={H} is not divisible by num_kv_heads", f"num_heads={H} 不能被 num_kv_heads 整除"),
        ),
        (
            (H * rng.choice([3, 5]), H, 2),
            pick("the head size is odd: RoPE rotates pairs of coordinates", "头大小是奇数：RoPE 成对旋转坐标"),
        ),
    ]
    for (E, heads, kv_heads), reason in attempts:
        positional = {"embed_dim": E, "num_heads": heads, "num_kv_heads": kv_heads}
        modules.check_raises(KVC, kata, positional, {}, expected=ValueError, reason=reason)


@convention(
    "update writes into the buffers allocated once (never a new buffer, no torch.cat)",
    zh="解码时一直用缓存最初分配的缓冲区",
)
def test_decoding_keeps_the_buffers_the_cache_allocated(kata, rng, gen):
    """Read from the trace's tensors (see common.py): after every call, cache.k and cache.v are
    still the buffers KVCache(...) allocated."""
    case = CASES.random(rng)[0]
    with case.judged():
        model = build(gen, rng, case)
        x = sequence(gen, case, torch.float32)

        def judge(index, text, got, a, b, want) -> None:
            check_buffers_kept(got["buffers kept"], after=text)

        judge_decoding(kata, model, [x], [random_chunks(rng, case)], judge)


@convention(
    "results follow x's device (the causal mask and the RoPE angles made inside forward too)",
    zh="结果位于输入所在的设备上",
)
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """The buffers KVCache(device=...) allocates, and every call's output while decoding there."""
    judge_decoding_on_device(kata, other_device)


@convention("x is never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Checked by value, on each chunk as the call left it."""
    case = CASES.random(rng)[1]
    with case.judged():
        model = build(gen, rng, case)
        x = sequence(gen, case, torch.float32)
        chunks = random_chunks(rng, case)

        def judge(index, text, got, a, b, want) -> None:
            check_unchanged(x[:, a:b], got["x"], call=text, what="x")

        judge_decoding(kata, model, [x], [chunks], judge)

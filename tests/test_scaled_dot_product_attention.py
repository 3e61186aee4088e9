"""scaled_dot_product_attention: judged against F.scaled_dot_product_attention.

The output is compared with PyTorch's in the same dtype. PyTorch does not return the
weights, so they are PyTorch's too, obtained in float64 by attending over an identity
`value` (row i of softmax(...) @ I is row i of the weights).
"""

import torch
import torch.nn.functional as F

from judge.forbidden import ATTENTION
from judge.testing.attention import case_table, relative_scale
from judge.testing.functions import FunctionKata, pair
from judge.testing.inputs import randn, random_keep_mask
from judge.testing.spec import FLOAT64_RULE, KataSpec, dtypes
from judge.testing.tiers import convention, core
from judge.testing.tolerances import SINGLE_OP

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: batch 8, 8 heads, length 128, head size 64,
    with a causal mask. The kata also returns the weights, which the fused reference never builds."""
    gen = torch.Generator().manual_seed(0)
    query, key, value = (randn(gen, 8, 8, 128, 64, device=device) for _ in range(3))
    return (lambda: kata.scaled_dot_product_attention(query, key, value, is_causal=True)), (
        lambda: F.scaled_dot_product_attention(query, key, value, is_causal=True)
    )


SPEC = KataSpec(
    kata="scaled_dot_product_attention",
    symbol="scaled_dot_product_attention",
    reference="F.scaled_dot_product_attention in the inputs' dtype; the weights in float64",
    forbidden=ATTENTION,
    tolerances=SINGLE_OP,
    tolerance_note="one operation against PyTorch's in the same dtype: PyTorch's own defaults, a few ulps in half precision",
    cases=case_table(largest=13),
    benchmark=benchmark,
)
SDPA = FunctionKata(
    SPEC,
    outputs=pair("output", "weights"),
    parameters={"scaled_dot_product_attention": ("query", "key", "value", "attn_mask", "is_causal", "scale")},
)


def make_inputs(gen, case, dtype, device):
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    return query, key, value


def mask_shape(rng, case) -> list[int]:
    """[L, S], the full [..., L, S], or a broadcastable [B, 1, L, S]-like shape."""
    lead, ls = case["lead"], [case["L"], case["S"]]
    choices = [ls, lead + ls] + ([[lead[0]] + [1] * (len(lead) - 1) + ls] if lead else [])
    return rng.choice(choices)


def boolean_mask(gen, rng, case, device) -> torch.Tensor:
    return random_keep_mask(gen, *mask_shape(rng, case)).to(device)


def float_mask(gen, rng, case, dtype, device) -> torch.Tensor:
    shape = mask_shape(rng, case)
    keep = random_keep_mask(gen, *shape)
    return randn(gen, *shape, dtype=dtype).masked_fill(~keep, float("-inf")).to(device)


def reference(query, key, value, **kwargs):
    """PyTorch's output in the inputs' dtype, and PyTorch's weights computed in float64."""
    output = F.scaled_dot_product_attention(query, key, value, **kwargs)
    mask = kwargs.get("attn_mask")
    if mask is not None and mask.is_floating_point():
        kwargs["attn_mask"] = mask.double()
    S = key.size(-2)
    identity = torch.eye(S, dtype=torch.float64, device=key.device).expand(*key.shape[:-2], S, S)
    weights = F.scaled_dot_product_attention(query.double(), key.double(), identity, **kwargs)
    return output, weights.to(query.dtype)


def sizes(query, key, value) -> dict:
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1)}


def check_against_pytorch(kata, query, key, value, *, float64_throughout=False, **kwargs):
    want_output, want_weights = reference(query, key, value, **kwargs)
    with SDPA.judging(kata, query, key, value, sizes=sizes(query, key, value), **kwargs) as call:
        for what, want in (("weights", want_weights), ("output", want_output)):
            SPEC.assert_close(call[what], want, call=call.text, what=what, float64_throughout=float64_throughout)


@core(zh="无掩码时与 PyTorch 一致")
@dtypes(*FULL)
def test_matches_pytorch_without_a_mask(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device))


@core(zh="布尔掩码中 True 表示可以关注")
@dtypes(*FULL)
def test_boolean_mask_true_means_may_attend(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            mask = boolean_mask(gen, rng, case, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask)


@core(zh="浮点掩码加到注意力分数上")
@dtypes(*FULL)
def test_float_mask_is_added_to_the_scores(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            mask = float_mask(gen, rng, case, dtype, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask)


@core(zh="is_causal 按左上角对齐")
@dtypes(*FULL)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), is_causal=True)


@core(zh="自定义 scale 取代默认值")
@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    """Scales 0.4x to 2.2x the default 1/sqrt(E), so the softmax neither saturates nor stays flat."""
    for case in SPEC.cases.cases(rng):
        with case.judged():
            scale = relative_scale(rng, case["E"])
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), scale=scale)
            mask = boolean_mask(gen, rng, case, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask, scale=scale)


@convention(
    "float16 and bfloat16 work in their own dtype: a blocked score must become -inf",
    zh="半精度下掩码和 is_causal 都能工作",
)
@dtypes(*HALF)
def test_half_precision_works_with_masks_and_is_causal(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            mask = boolean_mask(gen, rng, case, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), is_causal=True)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    for case in SPEC.cases.cases(rng, 2):
        with case.judged():
            mask = float_mask(gen, rng, case, torch.float64, "cpu")
            inputs = make_inputs(gen, case, torch.float64, "cpu")
            check_against_pytorch(kata, *inputs, attn_mask=mask, float64_throughout=True)


@convention("results follow the inputs' device (a causal mask made inside too).", zh="结果位于输入所在的设备上")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    case = SPEC.cases.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for masked in (False, True):

        def make(device, masked=masked):
            gen = torch.Generator().manual_seed(0)
            query, key, value = make_inputs(gen, case, torch.float32, device)
            extra = {"attn_mask": random_keep_mask(gen, case["L"], case["S"]).to(device)} if masked else {}
            return (query, key, value), {"is_causal": True} if not masked else extra

        def expected(device, make=make) -> dict:
            output, weights = reference(*make(device)[0], **make(device)[1])
            return {"output": output, "weights": weights}

        SDPA.on_device(
            kata, other_device, make=make, expected=expected, compare=SPEC.assert_close, sizes=sizes_of(case)
        )


def sizes_of(case) -> dict:
    return {k: case[k] for k in ("L", "S", "E", "Ev")}


@convention("the inputs and the mask are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Both mask kinds."""
    case = SPEC.cases.random(rng)[0]
    query, key, value = make_inputs(gen, case, torch.float32, "cpu")
    for mask in (boolean_mask(gen, rng, case, "cpu"), float_mask(gen, rng, case, torch.float32, "cpu")):
        with SDPA.judging(kata, query, key, value, attn_mask=mask, sizes=sizes(query, key, value)) as call:
            SDPA.assert_inputs_unchanged(call, (query, key, value), {"attn_mask": mask})

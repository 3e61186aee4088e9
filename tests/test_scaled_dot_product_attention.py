"""scaled_dot_product_attention: judged against F.scaled_dot_product_attention.

The output is compared with PyTorch's in the same dtype. PyTorch does not return the
weights, so they are PyTorch's too, obtained in float64 by attending over an identity
`value` (row i of softmax(...) @ I is row i of the weights).
"""

import torch
import torch.nn.functional as F

from judge.forbidden import ATTENTION
from judge.testing.attention import case_table, relative_scale
from judge.testing.checks import call_and_check_inputs, call_repr, check_tensor_kind, describe
from judge.testing.inputs import randn, random_keep_mask
from judge.testing.spec import KataSpec, dtypes
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


def call_kata(kata, query, key, value, **kwargs):
    call = call_repr("scaled_dot_product_attention", query, key, value, **kwargs)
    inputs = {"query": query, "key": key, "value": value, "attn_mask": kwargs.get("attn_mask")}
    result = call_and_check_inputs(
        lambda: kata.scaled_dot_product_attention(query, key, value, **kwargs), call, **inputs
    )
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(f"{call} returned {describe(result)}; expected a pair (output, weights)")
    return call, result[0], result[1]


def replay(query, key, value, **kwargs):
    """The same call with another implementation, on copies of the inputs taken now (for the
    diagnosis)."""
    tensors = [query.clone(), key.clone(), value.clone()]
    kwargs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}

    def run(implementation) -> dict:
        copies = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        _, output, weights = call_kata(implementation, *(t.clone() for t in tensors), **copies)
        return {"weights": weights, "output": output}

    return run


def sizes(query, key, value) -> dict:
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1)}


def check_against_pytorch(kata, query, key, value, **kwargs):
    want_output, want_weights = reference(query, key, value, **kwargs)  # first: the kata may break its inputs
    with SPEC.diagnosing(replay(query, key, value, **kwargs), sizes(query, key, value)):
        call, output, weights = call_kata(kata, query, key, value, **kwargs)
        SPEC.assert_close(weights, want_weights, call=call, what="weights")
        SPEC.assert_close(output, want_output, call=call, what="output")


@dtypes(*FULL)
def test_matches_pytorch_without_a_mask(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device))


@dtypes(*FULL + HALF)
def test_boolean_mask_true_means_may_attend(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            mask = boolean_mask(gen, rng, case, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask)


@dtypes(*FULL)
def test_float_mask_is_added_to_the_scores(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            mask = float_mask(gen, rng, case, dtype, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask)


@dtypes(*FULL + HALF)
def test_is_causal_is_top_left_aligned(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), is_causal=True)


@dtypes(*FULL)
def test_custom_scale_replaces_the_default(kata, rng, gen, dtype, device):
    """Scales 0.4x to 2.2x the default 1/sqrt(E), so the softmax neither saturates nor stays flat."""
    for case in SPEC.cases.cases(rng):
        with case.judged():
            scale = relative_scale(rng, case["E"])
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), scale=scale)
            mask = boolean_mask(gen, rng, case, device)
            check_against_pytorch(kata, *make_inputs(gen, case, dtype, device), attn_mask=mask, scale=scale)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """Masks made inside the kata must be made on the inputs' device."""
    case = SPEC.cases.random(rng)[1]
    inputs = make_inputs(gen, case, torch.float32, other_device)
    for kwargs in ({"is_causal": True}, {"attn_mask": boolean_mask(gen, rng, case, other_device)}):
        if other_device != "meta":
            check_against_pytorch(kata, *inputs, **kwargs)
            continue
        want_output, want_weights = reference(*inputs, **kwargs)
        with SPEC.diagnosing(replay(*inputs, **kwargs), sizes(*inputs)):
            call, output, weights = call_kata(kata, *inputs, **kwargs)
            # meta tensors have a shape and a device but no values
            check_tensor_kind(weights, want_weights, call=call, what="weights")
            check_tensor_kind(output, want_output, call=call, what="output")


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call is checked (see call_kata); this test makes sure both mask kinds are tried."""
    case = SPEC.cases.random(rng)[0]
    query, key, value = make_inputs(gen, case, torch.float32, "cpu")
    for mask in (boolean_mask(gen, rng, case, "cpu"), float_mask(gen, rng, case, torch.float32, "cpu")):
        with SPEC.diagnosing(replay(query, key, value, attn_mask=mask), sizes(query, key, value)):
            call_kata(kata, query, key, value, attn_mask=mask)

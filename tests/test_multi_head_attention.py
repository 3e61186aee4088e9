"""multi_head_attention: judged against nn.MultiheadAttention(batch_first=True).

The reference's parameters are all random; its packed in_proj_weight/in_proj_bias are
split into the learner's q_proj, k_proj and v_proj. Weights are compared per head, as
nn.MultiheadAttention returns them with average_attn_weights=False. The reference runs
in float64 (see module_testing) and never judges a query row whose keys are all blocked.
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing.checks import (
    assert_close,
    assert_prints_nothing,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import as_float_mask, blocked_mask, padding_mask, randn
from judge.testing.modules import (
    assert_close_where_defined,
    assert_dropout_is_active,
    attention_parameters,
    defined_rows,
    hidden_sizes,
    load_parameters,
    module_repr,
    randomise_,
    reference_masks,
)
from judge.testing.spec import KataSpec, dtypes

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
ASKS = "q_proj, k_proj, v_proj, out_proj (each nn.Linear(embed_dim, embed_dim, bias=bias))"


def build(kata, gen, case, dtype=torch.float32, device="cpu", *, bias=True, dropout=0.0):
    """(the learner's module in eval() mode, the float64 reference, how the module was built)."""
    E, H = case["E"], case["H"]
    reference = nn.MultiheadAttention(E, H, bias=bias, batch_first=True, dtype=torch.float64)
    randomise_(reference, gen, dtype)
    options = ({"dropout": dropout} if dropout else {}) | ({} if bias else {"bias": False})
    name = module_repr("MultiHeadAttention", embed_dim=E, num_heads=H, **options)
    module = kata.MultiHeadAttention(E, H, dropout=dropout, bias=bias).to(dtype)
    load_parameters(module, attention_parameters("", reference), what="MultiHeadAttention", asks=ASKS, built=name)
    return module.to(device).eval(), reference, name


def make_inputs(gen, case, dtype, device, *, cross: bool):
    """Self-attention (one tensor for query, key and value, S = L) or cross-attention."""
    query = randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)
    if not cross:
        return query, query, query
    key = randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)
    return query, key, value


def reference_call(
    reference, query, key, value, key_padding_mask=None, attn_mask=None, need_weights=True, is_causal=False
):
    """nn.MultiheadAttention in float64 on the CPU: (output, per-head weights, defined rows).
    The weights are computed whatever need_weights says; check() ignores them then."""
    B, L, S = query.size(0), query.size(1), key.size(1)
    attn_mask, key_padding_mask = reference_masks(attn_mask, key_padding_mask, L, S, is_causal)
    output, weights = reference(
        *(t.detach().cpu().double() for t in (query, key, value)),
        key_padding_mask=key_padding_mask,
        attn_mask=attn_mask,
        need_weights=True,
        average_attn_weights=False,
    )
    return output.detach(), weights.detach(), defined_rows(B, L, S, attn_mask, key_padding_mask)


def call_kata(module, name, query, key, value, **kwargs):
    """(how the call looked, output, weights), after checking no input was changed in place."""
    call = call_repr(name, query, key, value, **kwargs)
    inputs = {"query": query, "key": key, "value": value}
    inputs |= {k: kwargs[k] for k in ("key_padding_mask", "attn_mask") if kwargs.get(k) is not None}
    result = call_and_check_inputs(lambda: module(query, key, value, **kwargs), call, **inputs)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(f"{call} returned {describe(result)}; expected a pair (output, weights)")
    return call, result[0], result[1]


def check(module, reference, name, query, key, value, **kwargs):
    """The learner's (output, weights) against nn.MultiheadAttention's, on the defined rows."""
    want_output, want_weights, defined = reference_call(reference, query, key, value, **kwargs)
    call, output, weights = call_kata(module, name, query, key, value, **kwargs)
    dtype, device = query.dtype, query.device
    if kwargs.get("need_weights", True):
        want = want_weights.to(dtype=dtype, device=device)
        assert_close_where_defined(weights, want, defined, call=call, what="weights")
    elif weights is not None:
        raise AssertionError(f"{call} returned weights {describe(weights)}; expected None with need_weights=False")
    want = want_output.to(dtype=dtype, device=device)
    assert_close_where_defined(output, want, defined, call=call, what="output")


@dtypes(*FULL)
def test_matches_nn_multihead_attention_in_self_attention(kata, rng, gen, dtype, device):
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device, bias=rng.random() < 0.7)
        check(module, reference, name, *make_inputs(gen, case, dtype, device, cross=False))


@dtypes(*FULL)
def test_matches_nn_multihead_attention_in_cross_attention(kata, rng, gen, dtype, device):
    """L != S, and key and value are different tensors."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device, bias=rng.random() < 0.7)
        check(module, reference, name, *make_inputs(gen, case, dtype, device, cross=True))


@dtypes(*FULL)
def test_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, S], a different number of padded keys per batch row."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device)
        for cross in (False, True):
            inputs = make_inputs(gen, case, dtype, device, cross=cross)
            padding = padding_mask(gen, case["B"], inputs[1].size(1)).to(device)
            check(module, reference, name, *inputs, key_padding_mask=padding)


@dtypes(*FULL)
def test_attn_mask_true_blocks_that_query_key_pair(kata, rng, gen, dtype, device):
    """[L, S], alone and together with a key_padding_mask."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device)
        inputs = make_inputs(gen, case, dtype, device, cross=True)
        mask = blocked_mask(gen, case["L"], case["S"]).to(device)
        check(module, reference, name, *inputs, attn_mask=mask)
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        check(module, reference, name, *inputs, key_padding_mask=padding, attn_mask=mask)


@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype, device):
    """Finite random values, -inf where blocked, in attn_mask and key_padding_mask alike."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device)
        inputs = make_inputs(gen, case, dtype, device, cross=True)
        mask = as_float_mask(gen, blocked_mask(gen, case["L"], case["S"]), dtype).to(device)
        padding = as_float_mask(gen, padding_mask(gen, case["B"], case["S"]), dtype).to(device)
        check(module, reference, name, *inputs, attn_mask=mask)
        check(module, reference, name, *inputs, key_padding_mask=padding, attn_mask=mask)


@dtypes(*FULL)
def test_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No attn_mask needed (PyTorch's module would want one); with and without padding, and
    top-left aligned in cross-attention (L != S): query i sees keys 0..i."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, case, dtype, device)
        inputs = make_inputs(gen, case, dtype, device, cross=False)
        check(module, reference, name, *inputs, is_causal=True)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
        check(module, reference, name, *inputs, key_padding_mask=padding, is_causal=True)
        check(module, reference, name, *make_inputs(gen, case, dtype, device, cross=True), is_causal=True)


@dtypes(*FULL)
def test_need_weights_false_returns_none_for_the_weights(kata, rng, gen, dtype, device):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, case, dtype, device)
        inputs = make_inputs(gen, case, dtype, device, cross=True)
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        check(module, reference, name, *inputs, key_padding_mask=padding, need_weights=False)


@dtypes(*HALF)
def test_works_in_half_precision_with_masks(kata, rng, gen, dtype):
    """A blocked score must become -inf (or the dtype's lowest): -1e9 does not fit in float16."""
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, case, dtype)
        inputs = make_inputs(gen, case, dtype, "cpu", cross=False)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True)
        check(module, reference, name, *inputs, key_padding_mask=padding, is_causal=True)


def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, case, dropout=0.5)
        check(module, reference, name + ".eval()", *make_inputs(gen, case, torch.float32, "cpu", cross=True))


def test_train_mode_applies_dropout(kata, rng, gen, seed):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, case, dropout=0.5)
    inputs = make_inputs(gen, case, torch.float32, "cpu", cross=True)
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, second = module(*inputs)[0], module(*inputs)[0]
    assert_dropout_is_active(first, second, call=call_repr(name + ".train()", *inputs))


def test_gradients_flow_back_to_the_inputs_like_pytorch(kata, rng, gen):
    """Autograd must see every step: no .detach(), .data or torch.no_grad() inside forward."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, case, torch.float64)
    inputs = [t.clone().requires_grad_() for t in make_inputs(gen, case, torch.float64, "cpu", cross=True)]
    twins = [t.detach().clone().requires_grad_() for t in inputs]
    padding = padding_mask(gen, case["B"], case["S"])
    call = call_repr(name, *inputs, key_padding_mask=padding) + ".backward"
    upstream = randn(gen, case["B"], case["L"], case["E"], dtype=torch.float64)
    output = module(*inputs, key_padding_mask=padding)[0]
    if not output.requires_grad:
        raise AssertionError(f"{call}: the output does not require grad; autograd lost track of the inputs")
    (output * upstream).sum().backward()
    (reference(*twins, key_padding_mask=padding, need_weights=False)[0] * upstream).sum().backward()
    for what, mine, theirs in zip(("query", "key", "value"), inputs, twins):
        if mine.grad is None:
            raise AssertionError(f"{call}: no gradient reached `{what}`")
        assert_close(mine.grad, theirs.grad, call=call, what=f"the gradient of `{what}`")


def test_embed_dim_not_divisible_by_num_heads_raises_value_error(kata, rng):
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    assert_raises_value_error(
        lambda: kata.MultiHeadAttention(E, H),
        call=f"MultiHeadAttention(embed_dim={E}, num_heads={H})",
        reason=f"embed_dim {E} cannot be split evenly into {H} heads",
    )


def test_has_the_projections_of_nn_multihead_attention(kata, rng, gen):
    """q_proj, k_proj, v_proj, out_proj, with biases exactly when bias=True."""
    case = hidden_sizes(rng)[1]
    for bias in (True, False):
        build(kata, gen, case, bias=bias)


def test_writes_its_own_attention(kata, rng, gen):
    """FORBIDDEN refuses F.scaled_dot_product_attention, F.multi_head_attention_forward and
    nn.MultiheadAttention while the kata runs; here every path through forward runs once."""
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, case)
    inputs = make_inputs(gen, case, torch.float32, "cpu", cross=False)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True)
    for kwargs in ({}, {"need_weights": False}, {"key_padding_mask": padding, "need_weights": False}):
        for causal in (False, True):
            call_kata(module, name, *inputs, is_causal=causal, **kwargs)
    module.train()
    call_kata(module, name + ".train()", *inputs, need_weights=False)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """Masks made inside forward (is_causal) must be made on the inputs' device."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, case, device=other_device)
    inputs = make_inputs(gen, case, torch.float32, other_device, cross=False)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(other_device)
    kwargs = {"key_padding_mask": padding, "is_causal": True}
    if other_device != "meta":
        check(module, reference, name, *inputs, **kwargs)
        return
    result = call_on_device(lambda: call_kata(module, name, *inputs, **kwargs), other_device)
    if result is None:  # read tensor values in Python: fine on a real GPU, inconclusive here
        return
    call, output, weights = result  # meta tensors have a shape and a device but no values
    B, L, E, H = case["B"], case["L"], case["E"], case["H"]
    check_tensor_kind(weights, torch.empty(B, H, L, L, device="meta"), call=call, what="weights")
    check_tensor_kind(output, torch.empty(B, L, E, device="meta"), call=call, what="output")


def test_does_not_modify_its_inputs(kata, rng, gen):
    """call_kata checks every call; here with boolean and float masks of both kinds."""
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, case)
    inputs = make_inputs(gen, case, torch.float32, "cpu", cross=True)
    padding, mask = padding_mask(gen, case["B"], case["S"]), blocked_mask(gen, case["L"], case["S"])
    call_kata(module, name, *inputs, key_padding_mask=padding, attn_mask=mask)
    padding, mask = as_float_mask(gen, padding, torch.float32), as_float_mask(gen, mask, torch.float32)
    call_kata(module, name, *inputs, key_padding_mask=padding, attn_mask=mask)


def test_prints_nothing(kata, rng, gen, capfd):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, case)
    inputs = make_inputs(gen, case, torch.float32, "cpu", cross=False)
    module(*inputs, is_causal=True)
    assert_prints_nothing(capfd, f"{name}(...)")


def benchmark(kata, device):
    """(kata call, reference call): self-attention at batch 8, length 128, embed_dim 512, 8 heads,
    need_weights=False, in eval() mode. Under the grader's torch.no_grad() the reference takes
    nn.MultiheadAttention's inference fast path (torch._native_multi_head_attention), what
    PyTorch users run for inference."""
    B, L, E, H = 8, 128, 512, 8
    reference = nn.MultiheadAttention(E, H, batch_first=True, device=device).eval()
    module = kata.MultiHeadAttention(E, H)
    load_parameters(module, attention_parameters("", reference), what="MultiHeadAttention", asks=ASKS)
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, L, E, device=device)
    return (lambda: module(x, x, x, need_weights=False)), (lambda: reference(x, x, x, need_weights=False))


SPEC = KataSpec(
    kata="multi_head_attention",
    symbol="MultiHeadAttention",
    reference="nn.MultiheadAttention(batch_first=True)",
    forbidden=ATTENTION,
    benchmark=benchmark,
)

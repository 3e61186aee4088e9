"""multi_head_attention: judged against nn.MultiheadAttention(batch_first=True).

The reference's parameters are all random; its packed in_proj_weight/in_proj_bias are
split into the learner's q_proj, k_proj and v_proj. Weights are compared per head, as
nn.MultiheadAttention returns them with average_attn_weights=False. The reference runs
in float64 (see judge.testing.modules) and never judges a query row whose keys are all
blocked.
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import describe
from judge.testing.inputs import as_float_mask, blocked_mask, padding_mask, randn
from judge.testing.modules import CASES, ModuleKata, attention_parameters, defined_rows, reference_masks
from judge.testing.spec import FLOAT64_RULE, KataSpec, dtypes
from judge.testing.tiers import convention, core
from judge.testing.tolerances import SINGLE_OP

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]


def reference_forward(reference, inputs, kwargs):
    """nn.MultiheadAttention in float64: ({output, per-head weights or None}, defined rows).
    is_causal becomes an explicit mask (PyTorch takes it only as a hint about attn_mask)."""
    query, key = inputs["query"], inputs["key"]
    B, L, S = query.size(0), query.size(1), key.size(1)
    attn_mask, key_padding_mask = reference_masks(
        kwargs.get("attn_mask"), kwargs.get("key_padding_mask"), L, S, kwargs.get("is_causal", False)
    )
    output, weights = reference(
        *inputs.values(), key_padding_mask=key_padding_mask, attn_mask=attn_mask, average_attn_weights=False
    )
    weights = weights.detach() if kwargs.get("need_weights", True) else None
    return {"weights": weights, "output": output.detach()}, defined_rows(B, L, S, attn_mask, key_padding_mask)


def outputs(result, call, kwargs):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(
            pick(
                f"{call} returned {describe(result)}; expected a pair (output, weights)",
                f"{call} 返回了 {describe(result)}；应返回一对 (output, weights)",
            )
        )
    return {"weights": result[1], "output": result[0]}


MHA = ModuleKata(
    kata="multi_head_attention",
    cls="MultiHeadAttention",
    asks=pick(
        "q_proj, k_proj, v_proj, out_proj (each nn.Linear(embed_dim, embed_dim, bias=bias))",
        "q_proj、k_proj、v_proj、out_proj（每个都是 nn.Linear(embed_dim, embed_dim, bias=bias)）",
    ),
    inputs=("query", "key", "value"),
    reference=lambda case, options: nn.MultiheadAttention(
        case["E"], case["H"], bias=options.get("bias", True), batch_first=True, dtype=torch.float64
    ),
    parameters=lambda reference: attention_parameters("", reference),
    arguments=lambda case, options: ({"embed_dim": case["E"], "num_heads": case["H"]}, options),
    forward=reference_forward,
    outputs=outputs,
    output=0,
    tolerances=SINGLE_OP,  # measured: solutions and variants at most 0.1 of it in float32, 0.57 in half precision
)


def benchmark(kata, device):
    """(kata call, reference call): self-attention at batch 8, length 128, embed_dim 512, 8 heads,
    need_weights=False, in eval() mode. Under the grader's torch.no_grad() the reference takes
    nn.MultiheadAttention's inference fast path (torch._native_multi_head_attention), what
    PyTorch users run for inference."""
    B, L, E, H = 8, 128, 512, 8
    reference = nn.MultiheadAttention(E, H, batch_first=True, device=device).eval()
    module = kata.MultiHeadAttention(E, H)
    modules.load_state(module, attention_parameters("", reference))
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, L, E, device=device)
    return (lambda: module(x, x, x, need_weights=False)), (lambda: reference(x, x, x, need_weights=False))


SPEC = KataSpec(
    kata="multi_head_attention",
    symbol="MultiHeadAttention",
    reference="nn.MultiheadAttention(batch_first=True) in float64, its parameters copied in",
    forbidden=ATTENTION,
    tolerances=MHA.tolerances,
    tolerance_note="PyTorch's single-op tolerances: solutions and variants measured at most 0.1 of them in float32",
    cases=CASES,
    benchmark=benchmark,
)


def build(gen, case, dtype=torch.float32, device="cpu", *, bias=True, dropout=0.0, train=False):
    options = ({"dropout": dropout} if dropout else {}) | ({} if bias else {"bias": False})
    return modules.build(MHA, gen, case, options, dtype, device, train=train)


def make_inputs(gen, case, dtype=torch.float32, device="cpu", *, cross: bool) -> dict:
    """Self-attention (one tensor for query, key and value, S = L) or cross-attention."""
    query = randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)
    if not cross:
        return {"query": query, "key": query, "value": query}
    key = randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)
    return {"query": query, "key": key, "value": value}


def check(kata, built, inputs, **kwargs):
    modules.check(MHA, kata, built, inputs, **kwargs)


@core(zh="自注意力下与 nn.MultiheadAttention 一致")
@dtypes(*FULL)
def test_matches_nn_multihead_attention_in_self_attention(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, case, dtype, device, bias=rng.random() < 0.7)
            check(kata, built, make_inputs(gen, case, dtype, device, cross=False))


@core(zh="交叉注意力下与 nn.MultiheadAttention 一致")
@dtypes(*FULL)
def test_matches_nn_multihead_attention_in_cross_attention(kata, rng, gen, dtype, device):
    """L != S, and key and value are different tensors."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, case, dtype, device, bias=rng.random() < 0.7)
            check(kata, built, make_inputs(gen, case, dtype, device, cross=True))


@core(zh="key_padding_mask 为 True 的键被忽略")
@dtypes(*FULL)
def test_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, S], a different number of padded keys per batch row."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, case, dtype, device)
            for cross in (False, True):
                inputs = make_inputs(gen, case, dtype, device, cross=cross)
                padding = padding_mask(gen, case["B"], inputs["key"].size(1)).to(device)
                check(kata, built, inputs, key_padding_mask=padding)


@core(zh="attn_mask 为 True 处屏蔽该查询-键对")
@dtypes(*FULL)
def test_attn_mask_true_blocks_that_query_key_pair(kata, rng, gen, dtype, device):
    """[L, S], alone and together with a key_padding_mask."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, case, dtype, device)
            inputs = make_inputs(gen, case, dtype, device, cross=True)
            mask = blocked_mask(gen, case["L"], case["S"]).to(device)
            check(kata, built, inputs, attn_mask=mask)
            padding = padding_mask(gen, case["B"], case["S"]).to(device)
            check(kata, built, inputs, key_padding_mask=padding, attn_mask=mask)


@core(zh="浮点掩码加到注意力分数上")
@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype, device):
    """Finite random values, -inf where blocked, in attn_mask and key_padding_mask alike."""
    for case in CASES.random(rng):
        with case.judged():
            built = build(gen, case, dtype, device)
            inputs = make_inputs(gen, case, dtype, device, cross=True)
            mask = as_float_mask(gen, blocked_mask(gen, case["L"], case["S"]), dtype).to(device)
            padding = as_float_mask(gen, padding_mask(gen, case["B"], case["S"]), dtype).to(device)
            check(kata, built, inputs, attn_mask=mask)
            check(kata, built, inputs, key_padding_mask=padding, attn_mask=mask)


@core(zh="is_causal 自行施加因果掩码")
@dtypes(*FULL)
def test_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No attn_mask needed (PyTorch's module would want one); with and without padding, and
    top-left aligned in cross-attention (L != S): query i sees keys 0..i."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, case, dtype, device)
            inputs = make_inputs(gen, case, dtype, device, cross=False)
            check(kata, built, inputs, is_causal=True)
            padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
            check(kata, built, inputs, key_padding_mask=padding, is_causal=True)
            check(kata, built, make_inputs(gen, case, dtype, device, cross=True), is_causal=True)


@core(zh="is_causal 与 attn_mask 同时生效")
@dtypes(*FULL)
def test_is_causal_and_attn_mask_both_apply(kata, rng, gen, dtype, device):
    """Given together, a key is blocked when either blocks it (boolean and float masks)."""
    for case in CASES.random(rng):
        with case.judged():
            built = build(gen, case, dtype, device)
            inputs = make_inputs(gen, case, dtype, device, cross=True)
            mask = blocked_mask(gen, case["L"], case["S"])
            check(kata, built, inputs, attn_mask=mask.to(device), is_causal=True)
            check(kata, built, inputs, attn_mask=as_float_mask(gen, mask, dtype).to(device), is_causal=True)


@core(zh="具有 nn.MultiheadAttention 的各个投影")
def test_has_the_projections_of_nn_multihead_attention(kata, rng, gen):
    """q_proj, k_proj, v_proj, out_proj, with biases exactly when bias=True."""
    case = CASES.random(rng)[1]
    for bias in (True, False):
        check(kata, build(gen, case, bias=bias), make_inputs(gen, case, cross=True))


@core(zh="自己实现注意力")
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; here every
    path through forward runs once."""
    case = CASES.random(rng)[1]
    built = build(gen, case)
    inputs = make_inputs(gen, case, cross=False)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True)
    for kwargs in ({}, {"need_weights": False}, {"key_padding_mask": padding, "need_weights": False}):
        for causal in (False, True):
            modules.call(MHA, kata, built, inputs, is_causal=causal, **kwargs)
    modules.call(MHA, kata, built.mode(True), inputs, need_weights=False)


@convention("weights: ... None when need_weights=False.", zh="need_weights=False 时权重返回 None")
@dtypes(*FULL)
def test_need_weights_false_returns_none_for_the_weights(kata, rng, gen, dtype, device):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, case, dtype, device)
            inputs = make_inputs(gen, case, dtype, device, cross=True)
            padding = padding_mask(gen, case["B"], case["S"]).to(device)
            check(kata, built, inputs, key_padding_mask=padding, need_weights=False)


@convention(
    "dropout: probability of zeroing an attention weight, in train() mode only. eval() disables it.",
    zh="eval() 模式下关闭 dropout",
)
def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in CASES.random(rng, 2):
        with case.judged():
            check(kata, build(gen, case, dropout=0.5), make_inputs(gen, case, cross=True))


@convention(
    "dropout: probability of zeroing an attention weight, in train() mode only.", zh="train() 模式下启用 dropout"
)
def test_train_mode_applies_dropout(kata, rng, gen):
    case = CASES.random(rng)[1]
    modules.check_dropout_in_train_mode(MHA, kata, build(gen, case, dropout=0.5), make_inputs(gen, case, cross=True))


@convention(
    "float16 and bfloat16 work: a blocked score is -inf, not -1e9 (out of float16's range).",
    zh="带掩码时在半精度下也能工作",
)
@dtypes(*HALF)
def test_works_in_half_precision_with_masks(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, case, dtype)
            inputs = make_inputs(gen, case, dtype, cross=False)
            padding = padding_mask(gen, case["B"], case["L"], right_only=True)
            check(kata, built, inputs, key_padding_mask=padding, is_causal=True)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    for case in CASES.cases(rng, 2):
        with case.judged():
            built = build(gen, case, torch.float64)
            inputs = make_inputs(gen, case, torch.float64, cross=True)
            padding = padding_mask(gen, case["B"], case["S"])
            check(kata, built, inputs, key_padding_mask=padding, is_causal=True, float64_throughout=True)


@convention(
    "autograd sees every step (no .detach(), .data or torch.no_grad() inside forward).",
    zh="梯度像 PyTorch 一样回传到输入",
)
def test_gradients_flow_back_to_the_inputs_like_pytorch(kata, rng, gen):
    case = CASES.random(rng)[1]
    built = build(gen, case, torch.float64)
    inputs = make_inputs(gen, case, torch.float64, cross=True)
    padding = padding_mask(gen, case["B"], case["S"])
    upstream = randn(gen, case["B"], case["L"], case["E"], dtype=torch.float64)

    def reference(inputs: dict) -> dict:
        twins = {name: tensor.clone().requires_grad_() for name, tensor in inputs.items()}
        output = built.reference(*twins.values(), key_padding_mask=padding, need_weights=False)[0]
        (output * upstream).sum().backward()
        return {name: twin.grad for name, twin in twins.items()}

    modules.check_gradients(MHA, kata, built, inputs, upstream, reference, key_padding_mask=padding)


@convention(
    "raise ValueError when embed_dim is not divisible by num_heads.",
    zh="embed_dim 不能被 num_heads 整除时抛出 ValueError",
)
def test_embed_dim_not_divisible_by_num_heads_raises_value_error(kata, rng):
    modules.check_heads_must_divide(MHA, kata, rng, "embed_dim", "num_heads")


@convention("results follow the inputs' device (a causal mask made inside forward too).", zh="结果位于输入所在的设备上")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def make(gen, device):
        inputs = make_inputs(gen, case, device=device, cross=False)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
        return inputs, {"key_padding_mask": padding, "is_causal": True}

    modules.check_on_device(MHA, kata, case, {}, other_device, make)


@convention("the inputs and masks are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Boolean and float masks of both kinds."""
    case = CASES.random(rng)[1]
    built = build(gen, case)
    inputs = make_inputs(gen, case, cross=True)
    padding, mask = padding_mask(gen, case["B"], case["S"]), blocked_mask(gen, case["L"], case["S"])
    modules.assert_inputs_left_alone(MHA, kata, built, inputs, key_padding_mask=padding, attn_mask=mask)
    padding, mask = as_float_mask(gen, padding, torch.float32), as_float_mask(gen, mask, torch.float32)
    modules.assert_inputs_left_alone(MHA, kata, built, inputs, key_padding_mask=padding, attn_mask=mask)

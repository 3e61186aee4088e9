"""causal_lm_block: judged against nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True) with a causal mask.

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied into the learner's GPT-2 names: norm1 -> ln_1, self_attn -> attn (its packed
in_proj split into q_proj, k_proj, v_proj), norm2 -> ln_2, linear1 -> mlp.up_proj,
linear2 -> mlp.down_proj. The reference runs in float64 (see judge.testing.modules).
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing import modules_mirrored as modules
from judge.testing.inputs import as_float_mask, causal_blocked, padding_mask, randn
from judge.testing.modules_mirrored import (
    CASES,
    MODULE_TOLERANCES,
    ModuleKata,
    Probe,
    attention_parameters,
    defined_rows,
    renamed,
)
from judge.testing.spec import KataSpec, dtypes

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
GPT2_NAMES = {"norm1": "ln_1", "norm2": "ln_2", "linear1": "mlp.up_proj", "linear2": "mlp.down_proj"}


def parameters(reference: nn.TransformerEncoderLayer) -> dict[str, torch.Tensor]:
    return renamed(reference, GPT2_NAMES) | attention_parameters("attn.", reference.self_attn)


def reference_forward(reference, inputs, kwargs):
    """The reference with the causal mask passed explicitly: ({output}, defined rows)."""
    x = inputs["x"]
    T = x.size(1)
    causal = causal_blocked(T, T)
    padding = kwargs.get("key_padding_mask")
    if padding is not None:
        padding = padding.cpu()
        if padding.is_floating_point():  # PyTorch wants both masks of one kind
            padding = padding.double()
            causal = torch.zeros(T, T, dtype=torch.float64).masked_fill(causal, float("-inf"))
    output = reference(x, src_mask=causal, src_key_padding_mask=padding)
    return {"output": output.detach()}, defined_rows(x.size(0), T, T, causal, padding)


def pytorch_module(case, options):
    return nn.TransformerEncoderLayer(
        case["E"],
        case["H"],
        dim_feedforward=options.get("d_ff", 4 * case["E"]),
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=options.get("layer_norm_eps", 1e-5),
        batch_first=True,
        norm_first=True,
        bias=options.get("bias", True),
        dtype=torch.float64,
    )


BLOCK = ModuleKata(
    kata="causal_lm_block",
    cls="CausalLMBlock",
    asks="ln_1, attn (with q_proj, k_proj, v_proj, out_proj), ln_2, mlp (with up_proj, down_proj)",
    inputs=("x",),
    reference=pytorch_module,
    parameters=parameters,
    arguments=lambda case, options: ({"d_model": case["E"], "num_heads": case["H"]}, options),
    forward=reference_forward,
    probes=(
        Probe("attn", "self_attn", lambda attn, args, kw: attn(args[0], kw.get("key_padding_mask"))),
        Probe("mlp", "linear1", lambda mlp, args, kw: mlp(args[0]), output_of="linear2"),
    ),
)


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, length 128, d_model 512, 8 heads, d_ff 2048, in
    eval() mode. The reference gets the causal mask as PyTorch users pass it (a float
    generate_square_subsequent_mask, is_causal=True) and, under the grader's torch.no_grad(),
    takes nn.TransformerEncoderLayer's fused inference fast path (_transformer_encoder_layer_fwd)."""
    B, T, C, H = 8, 128, 512, 8
    reference = nn.TransformerEncoderLayer(
        C, H, 4 * C, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, device=device
    ).eval()
    module = kata.CausalLMBlock(C, H)
    modules.load_parameters(module, parameters(reference), what=BLOCK.cls, asks=BLOCK.asks)
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(T, device=torch.device(device))
    return (lambda: module(x)), (lambda: reference(x, src_mask=mask, is_causal=True))


SPEC = KataSpec(
    kata="causal_lm_block",
    symbol="CausalLMBlock",
    reference="nn.TransformerEncoderLayer(norm_first=True, activation='gelu') with a causal mask, in float64",
    forbidden=ATTENTION,
    tolerances=BLOCK.tolerances,
    tolerance_note="GELU and LayerNorms over a few values compound: solutions and variants measured at most 0.15 of these in float32",
    cases=CASES,
    benchmark=benchmark,
)


def build(kata, gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, dropout=0.0, bias=None):
    """The learner's block and the float64 reference. Non-default d_ff and eps unless
    `defaults`; then only (d_model, num_heads) are passed and the block stays in train()
    mode, which with the default dropout 0 changes nothing."""
    bias = rng.random() < 0.7 if bias is None else bias
    options = {} if defaults else {"d_ff": case["F"], "layer_norm_eps": rng.choice(modules.NON_DEFAULT_EPS)}
    options |= ({"dropout": dropout} if dropout else {}) | ({} if bias else {"bias": False})
    return modules.build(BLOCK, kata, gen, case, options, dtype, device, train=defaults)


def inputs(gen, case, dtype=torch.float32, device="cpu") -> dict:
    return {"x": randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)}


def check(built, x, **kwargs):
    modules.check(BLOCK, built, x, **kwargs)


@dtypes(*FULL)
def test_matches_pre_norm_transformer_encoder_layer_with_a_causal_mask(kata, rng, gen, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check(build(kata, gen, rng, case, dtype, device), inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, T], right-padded, a different length per batch row."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(kata, gen, rng, case, dtype, device)
            padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
            check(built, inputs(gen, case, dtype, device), key_padding_mask=padding)


@dtypes(*FULL)
def test_float_key_padding_mask_is_added_to_the_scores(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(kata, gen, rng, case, dtype)
            padding = as_float_mask(gen, padding_mask(gen, case["B"], case["L"], right_only=True), dtype)
            check(built, inputs(gen, case, dtype), key_padding_mask=padding)


def test_defaults_are_d_ff_4_d_model_no_dropout_and_eps_1e_5(kata, rng, gen):
    """CausalLMBlock(d_model, num_heads) in train() mode: the defaults must hold."""
    for case in CASES.random(rng, 2):
        with case.judged():
            check(build(kata, gen, rng, case, defaults=True), inputs(gen, case))


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(kata, gen, rng, case, dtype)
            padding = padding_mask(gen, case["B"], case["L"], right_only=True)
            check(built, inputs(gen, case, dtype), key_padding_mask=padding)


def test_later_positions_do_not_change_earlier_outputs(kata, rng, gen):
    """Causality on its own: change x from position t on; outputs before t must not move."""
    case = CASES.random(rng)[1]
    built = build(kata, gen, rng, case)
    x = inputs(gen, case)
    T = case["L"]
    t = rng.randrange(1, T)
    changed = {"x": x["x"].clone()}
    changed["x"][:, t:] = randn(gen, case["B"], T - t, case["E"])
    call, before = modules.call(BLOCK, built, x)
    _, after = modules.call(BLOCK, built, changed)
    moved = (before["output"][:, :t] - after["output"][:, :t]).abs().amax(dim=(0, 2))
    moved = moved > MODULE_TOLERANCES[torch.float32]["atol"]
    if moved.any():
        p = int(moved.nonzero()[0])
        raise AssertionError(
            f"{call}: changing x at positions {t}..{T - 1} only changed the output at position {p} < {t}; "
            "position p may attend to positions 0..p only (block key j > query i)"
        )


def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in CASES.random(rng, 2):
        with case.judged():
            check(build(kata, gen, rng, case, dropout=0.5), inputs(gen, case))


def test_train_mode_applies_dropout(kata, rng, gen, seed):
    case = CASES.random(rng)[1]
    built = build(kata, gen, rng, case, dropout=0.5)
    modules.check_dropout_in_train_mode(BLOCK, built, inputs(gen, case), seed)


def test_d_model_not_divisible_by_num_heads_raises_value_error(kata, rng):
    modules.check_heads_must_divide(BLOCK, kata, rng, "d_model", "num_heads")


def test_has_the_submodules_of_a_gpt2_block(kata, rng, gen):
    """ln_1, attn.{q,k,v,out}_proj, ln_2, mlp.{up,down}_proj, with biases exactly when bias=True."""
    case = CASES.random(rng)[1]
    for bias in (True, False):
        build(kata, gen, rng, case, bias=bias)


def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; every path
    of forward runs here."""
    case = CASES.random(rng)[1]
    built = build(kata, gen, rng, case, dropout=0.1)
    x = inputs(gen, case)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True)
    for mode in (built.module.eval, built.module.train):
        mode()
        modules.call(BLOCK, built, x)
        modules.call(BLOCK, built, x, key_padding_mask=padding)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """The causal mask made inside forward must be made on the input's device."""
    case = CASES.random(rng)[1]
    built = build(kata, gen, rng, case, device=other_device)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(other_device)
    modules.check_on_device(
        BLOCK, built, case, inputs(gen, case, device=other_device), other_device, key_padding_mask=padding
    )

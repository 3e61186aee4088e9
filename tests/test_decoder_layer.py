"""decoder_layer: judged against nn.TransformerDecoderLayer(batch_first=True).

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied by PyTorch's own names, the packed in_proj of self_attn and multihead_attn split
into q_proj, k_proj and v_proj. The memory is longer or shorter than the target (S != T).
Both norm_first settings and both activations are judged, with a non-default
layer_norm_eps. The reference runs in float64 (see judge.testing.modules); the learner's
layer is built from a recipe and called where the kata lives.
"""

import pytest
import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing import modules
from judge.testing.inputs import as_float_mask, blocked_mask, padding_mask, randn
from judge.testing.modules import (
    CASES,
    LAYER_TOLERANCES,
    ModuleKata,
    attention_parameters,
    defined_rows,
    layer_attention_probe,
    reference_masks,
    renamed,
)
from judge.testing.spec import FLOAT64_RULE, KataSpec, dtypes
from judge.testing.tiers import convention, core

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
LAYOUTS = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
ACTIVATIONS = pytest.mark.parametrize("activation", ["relu", "gelu"])
DROPOUT = "dropout: ... in train() mode only; eval() disables it."
DEFAULTS = (
    'the defaults are PyTorch\'s: dim_feedforward=2048, dropout=0.1, activation="relu", '
    "layer_norm_eps=1e-5, norm_first=False."
)


def parameters(reference: nn.TransformerDecoderLayer) -> dict[str, torch.Tensor]:
    """The reference's parameters under the kata's names (PyTorch's, in_proj split in three)."""
    names = {name: name for name in ("linear1", "linear2", "norm1", "norm2", "norm3")}
    return (
        renamed(reference, names)
        | attention_parameters("self_attn.", reference.self_attn)
        | attention_parameters("multihead_attn.", reference.multihead_attn)
    )


def reference_forward(reference, inputs, kwargs):
    """The reference with its masks made explicit: ({output}, defined rows)."""
    tgt, memory = inputs["tgt"], inputs["memory"]
    B, T, S = tgt.size(0), tgt.size(1), memory.size(1)
    tgt_mask, tgt_padding = reference_masks(
        kwargs.get("tgt_mask"), kwargs.get("tgt_key_padding_mask"), T, T, kwargs.get("tgt_is_causal", False)
    )
    memory_mask, memory_padding = reference_masks(
        kwargs.get("memory_mask"), kwargs.get("memory_key_padding_mask"), T, S, kwargs.get("memory_is_causal", False)
    )
    output = reference(
        tgt,
        memory,
        tgt_mask=tgt_mask,
        memory_mask=memory_mask,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=memory_padding,
    )
    defined = defined_rows(B, T, T, tgt_mask, tgt_padding) & defined_rows(B, T, S, memory_mask, memory_padding)
    return {"output": output.detach()}, defined


def pytorch_module(case, options):
    settings = {k: v for k, v in options.items() if k != "dropout"}
    return nn.TransformerDecoderLayer(
        case["E"], case["H"], **settings, dropout=0.0, batch_first=True, dtype=torch.float64
    )


DECODER = ModuleKata(
    kata="decoder_layer",
    cls="TransformerDecoderLayer",
    asks="self_attn and multihead_attn (each with q_proj, k_proj, v_proj, out_proj), linear1, linear2, norm1, norm2, norm3",
    inputs=("tgt", "memory"),
    reference=pytorch_module,
    parameters=parameters,
    arguments=lambda case, options: ({"d_model": case["E"], "nhead": case["H"]}, options),
    forward=reference_forward,
    tolerances=LAYER_TOLERANCES,
    probes=(
        layer_attention_probe("self_attn"),
        layer_attention_probe("multihead_attn"),
    ),
)


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, target and memory length 128, d_model 512, 8 heads,
    the default dim_feedforward 2048, post-norm, ReLU, eval() mode, with a causal tgt_mask (a float
    generate_square_subsequent_mask, tgt_is_causal=True, as PyTorch users pass it).
    nn.TransformerDecoderLayer has no fused layer kernel; under the grader's torch.no_grad() its
    self-attention may take nn.MultiheadAttention's inference fast path."""
    B, T, S, E, H = 8, 128, 128, 512, 8
    reference = nn.TransformerDecoderLayer(E, H, batch_first=True, device=device).eval()
    module = kata.TransformerDecoderLayer(E, H)
    modules.load_state(module, parameters(reference))
    module.to(device).eval()
    gen = torch.Generator().manual_seed(0)
    tgt, memory = randn(gen, B, T, E, device=device), randn(gen, B, S, E, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(T, device=torch.device(device))
    return (lambda: module(tgt, memory, tgt_is_causal=True)), (
        lambda: reference(tgt, memory, tgt_mask=mask, tgt_is_causal=True)
    )


SPEC = KataSpec(
    kata="decoder_layer",
    symbol="TransformerDecoderLayer",
    reference="nn.TransformerDecoderLayer(batch_first=True) in float64, its parameters copied in",
    forbidden=ATTENTION,
    tolerances=DECODER.tolerances,
    tolerance_note="a layer chains matmuls, a softmax and LayerNorms: solutions and variants measured at most 0.14 of these in float32",
    cases=CASES,
    benchmark=benchmark,
)


def build(gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, dropout=0.0, **chosen):
    """The recipe of the learner's layer (eval() mode) and the float64 reference (see
    modules.layer_options)."""
    options = modules.layer_options(rng, case, defaults=defaults, dropout=dropout, **chosen)
    built = modules.build(DECODER, gen, case, options, dtype, device)
    built.name += ".eval()" if defaults else ""
    return built


def inputs(gen, case, dtype=torch.float32, device="cpu") -> dict:
    """tgt [B, T, E] and memory [B, S, E]; T is the case's L."""
    tgt = randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)
    return {"tgt": tgt, "memory": randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)}


def check(kata, built, tensors, **kwargs):
    modules.check(DECODER, kata, built, tensors, **kwargs)


@core
@LAYOUTS
@ACTIVATIONS
@dtypes(*FULL)
def test_matches_nn_transformer_decoder_layer(kata, rng, gen, norm_first, activation, dtype, device):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device, norm_first=norm_first, activation=activation)
            check(kata, built, inputs(gen, case, dtype, device))


@core
@dtypes(*FULL)
def test_tgt_masks_true_block_self_attention(kata, rng, gen, dtype, device):
    """tgt_mask [T, T] alone, then with tgt_key_padding_mask [B, T] (a different length per row)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device)
            tensors = inputs(gen, case, dtype, device)
            mask = blocked_mask(gen, case["L"], case["L"]).to(device)
            check(kata, built, tensors, tgt_mask=mask)
            padding = padding_mask(gen, case["B"], case["L"]).to(device)
            check(kata, built, tensors, tgt_mask=mask, tgt_key_padding_mask=padding)


@core
@dtypes(*FULL)
def test_memory_masks_true_block_cross_attention(kata, rng, gen, dtype, device):
    """memory_key_padding_mask [B, S] (a different length per row) alone, then with memory_mask [T, S]."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device)
            tensors = inputs(gen, case, dtype, device)
            padding = padding_mask(gen, case["B"], case["S"]).to(device)
            check(kata, built, tensors, memory_key_padding_mask=padding)
            mask = blocked_mask(gen, case["L"], case["S"]).to(device)
            check(kata, built, tensors, memory_mask=mask, memory_key_padding_mask=padding)


@core
@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, rng, case, dtype)
            T, S, B = case["L"], case["S"], case["B"]
            masks = {
                "tgt_mask": as_float_mask(gen, blocked_mask(gen, T, T), dtype),
                "memory_mask": as_float_mask(gen, blocked_mask(gen, T, S), dtype),
                "tgt_key_padding_mask": as_float_mask(gen, padding_mask(gen, B, T), dtype),
                "memory_key_padding_mask": as_float_mask(gen, padding_mask(gen, B, S), dtype),
            }
            check(kata, built, inputs(gen, case, dtype), **masks)


@core
@dtypes(*FULL)
def test_tgt_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No tgt_mask needed (PyTorch's layer would want one); with padding on both sides."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(gen, rng, case, dtype, device)
            tensors = inputs(gen, case, dtype, device)
            check(kata, built, tensors, tgt_is_causal=True)
            paddings = {
                "tgt_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True).to(device),
                "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"]).to(device),
            }
            check(kata, built, tensors, tgt_is_causal=True, **paddings)


@core
@dtypes(*FULL)
def test_memory_is_causal_applies_a_causal_mask_to_the_memory(kata, rng, gen, dtype):
    """Target position i sees memory positions 0..i (top-left aligned, T != S)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check(kata, build(gen, rng, case, dtype), inputs(gen, case, dtype), memory_is_causal=True)


@core
@dtypes(*FULL)
def test_is_causal_and_masks_both_apply(kata, rng, gen, dtype):
    """tgt_is_causal with tgt_mask, memory_is_causal with memory_mask: a key is blocked when
    either blocks it (boolean and float masks)."""
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, rng, case, dtype)
            tensors = inputs(gen, case, dtype)
            T, S = case["L"], case["S"]
            tgt_mask, memory_mask = blocked_mask(gen, T, T), blocked_mask(gen, T, S)
            check(kata, built, tensors, tgt_mask=tgt_mask, tgt_is_causal=True)
            check(kata, built, tensors, memory_mask=memory_mask, memory_is_causal=True)
            floats = {
                "tgt_mask": as_float_mask(gen, tgt_mask, dtype),
                "memory_mask": as_float_mask(gen, memory_mask, dtype),
            }
            check(kata, built, tensors, tgt_is_causal=True, memory_is_causal=True, **floats)


@core
def test_has_the_submodules_of_nn_transformer_decoder_layer(kata, rng, gen):
    """self_attn, multihead_attn (q, k, v, out projections), linear1, linear2, norm1..3,
    with biases exactly when bias=True."""
    case = CASES.random(rng)[1]
    for bias in (True, False):
        check(kata, build(gen, rng, case, bias=bias), inputs(gen, case))


@core
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; every path
    of forward runs here, in eval() and train() mode."""
    case = CASES.random(rng)[1]
    tensors = inputs(gen, case)
    paddings = {
        "tgt_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True),
        "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"]),
    }
    for norm_first in (False, True):
        built = build(gen, rng, case, dropout=0.1, norm_first=norm_first)
        for train in (False, True):
            modules.call(DECODER, kata, built.mode(train), tensors)
            causal = {"tgt_is_causal": True, "memory_is_causal": True}
            modules.call(DECODER, kata, built.mode(train), tensors, **causal, **paddings)


@convention(DEFAULTS)
def test_defaults_match_pytorchs(kata, rng, gen):
    """TransformerDecoderLayer(d_model, nhead): dim_feedforward 2048, ReLU, post-norm, eps 1e-5,
    and dropout 0.1, inactive in eval()."""
    case = CASES.random(rng)[1]
    check(kata, build(gen, rng, case, defaults=True), inputs(gen, case))


@convention("float16 and bfloat16 work: a blocked score is -inf, not -1e9 (out of float16's range).")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(gen, rng, case, dtype)
            padding = padding_mask(gen, case["B"], case["S"])
            check(kata, built, inputs(gen, case, dtype), tgt_is_causal=True, memory_key_padding_mask=padding)


@convention(FLOAT64_RULE)
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    for case in CASES.cases(rng, 2):
        with case.judged():
            built = build(gen, rng, case, torch.float64)
            paddings = {
                "tgt_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True),
                "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"]),
            }
            tensors = inputs(gen, case, torch.float64)
            check(kata, built, tensors, tgt_is_causal=True, float64_throughout=True, **paddings)


@convention(DROPOUT)
def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in CASES.random(rng, 2):
        with case.judged():
            check(kata, build(gen, rng, case, dropout=0.5), inputs(gen, case), tgt_is_causal=True)


@convention("dropout: ... in train() mode only")
def test_train_mode_applies_dropout(kata, rng, gen):
    case = CASES.random(rng)[1]
    modules.check_dropout_in_train_mode(DECODER, kata, build(gen, rng, case, dropout=0.5), inputs(gen, case))


@convention("raise ValueError when d_model is not divisible by nhead.")
def test_d_model_not_divisible_by_nhead_raises_value_error(kata, rng):
    modules.check_heads_must_divide(DECODER, kata, rng, "d_model", "nhead", dim_feedforward=lambda E: 2 * E)


@convention("results follow the inputs' device (causal masks made inside forward too).")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """Causal masks made inside forward must be made on the inputs' device."""
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def make(gen, device):
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        kwargs = {"memory_key_padding_mask": padding, "tgt_is_causal": True, "memory_is_causal": True}
        return inputs(gen, case, device=device), kwargs

    modules.check_on_device(DECODER, kata, case, {"dim_feedforward": case["F"]}, other_device, make)


@convention("the inputs and masks are never changed in place.")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """All four masks, boolean and float, in both layouts."""
    case = CASES.random(rng)[1]
    B, T, S = case["B"], case["L"], case["S"]
    tensors = inputs(gen, case)
    masks = {
        "tgt_mask": blocked_mask(gen, T, T),
        "memory_mask": blocked_mask(gen, T, S),
        "tgt_key_padding_mask": padding_mask(gen, B, T),
        "memory_key_padding_mask": padding_mask(gen, B, S),
    }
    for norm_first in (False, True):
        built = build(gen, rng, case, norm_first=norm_first)
        modules.assert_inputs_left_alone(DECODER, kata, built, tensors, **masks)
    floats = {name: as_float_mask(gen, mask, torch.float32) for name, mask in masks.items()}
    causal = {"tgt_is_causal": True, "memory_is_causal": True}
    modules.assert_inputs_left_alone(DECODER, kata, built, tensors, **causal, **floats)

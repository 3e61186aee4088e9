"""decoder_layer: judged against nn.TransformerDecoderLayer(batch_first=True).

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied by PyTorch's own names, the packed in_proj of self_attn and multihead_attn split
into q_proj, k_proj and v_proj. The memory is longer or shorter than the target (S != T).
Both norm_first settings and both activations are judged, with a non-default
layer_norm_eps. The reference runs in float64 (see module_testing).
"""

import pytest
import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing.checks import (
    assert_prints_nothing,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
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
    renamed,
)
from judge.testing.spec import KataSpec, dtypes

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
ASKS = (
    "self_attn and multihead_attn (each with q_proj, k_proj, v_proj, out_proj), linear1, linear2, norm1, norm2, norm3"
)
NON_DEFAULT_EPS = [1e-3, 4e-3, 1e-2]
LAYOUTS = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
ACTIVATIONS = pytest.mark.parametrize("activation", ["relu", "gelu"])


def parameters(reference: nn.TransformerDecoderLayer) -> dict[str, torch.Tensor]:
    """The reference's parameters under the kata's names (PyTorch's, in_proj split in three)."""
    names = {name: name for name in ("linear1", "linear2", "norm1", "norm2", "norm3")}
    return (
        renamed(reference, names)
        | attention_parameters("self_attn.", reference.self_attn)
        | attention_parameters("multihead_attn.", reference.multihead_attn)
    )


def build(kata, gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, dropout=0.0, **chosen):
    """(the learner's layer in eval() mode, the float64 reference, how the layer was built).

    Unless `defaults`: dim_feedforward, layer_norm_eps and dropout are always passed, and
    norm_first, activation and bias are `chosen` or drawn at random. With `defaults` only
    (d_model, nhead) are passed."""
    E, H = case["E"], case["H"]
    options = {}
    if not defaults:
        options = {
            "dim_feedforward": case["F"],
            "dropout": dropout,
            "activation": chosen.get("activation", rng.choice(["relu", "gelu"])),
            "layer_norm_eps": rng.choice(NON_DEFAULT_EPS),
            "norm_first": chosen.get("norm_first", rng.random() < 0.5),
        }
        if not chosen.get("bias", rng.random() < 0.7):
            options["bias"] = False
    name = module_repr("TransformerDecoderLayer", d_model=E, nhead=H, **options)
    settings = {k: v for k, v in options.items() if k != "dropout"}
    reference = nn.TransformerDecoderLayer(E, H, **settings, dropout=0.0, batch_first=True, dtype=torch.float64)
    randomise_(reference, gen, dtype)
    module = kata.TransformerDecoderLayer(E, H, **options).to(dtype)
    load_parameters(module, parameters(reference), what="TransformerDecoderLayer", asks=ASKS, built=name)
    return module.to(device).eval(), reference, name + ".eval()" if defaults or dropout else name


def reference_call(
    reference,
    tgt,
    memory,
    tgt_mask=None,
    memory_mask=None,
    tgt_key_padding_mask=None,
    memory_key_padding_mask=None,
    tgt_is_causal=False,
    memory_is_causal=False,
):
    """The reference in float64 on the CPU (masks made explicit): (output, defined rows)."""
    B, T, S = tgt.size(0), tgt.size(1), memory.size(1)
    tgt_mask, tgt_key_padding_mask = reference_masks(tgt_mask, tgt_key_padding_mask, T, T, tgt_is_causal)
    memory_mask, memory_key_padding_mask = reference_masks(memory_mask, memory_key_padding_mask, T, S, memory_is_causal)
    output = reference(
        tgt.detach().cpu().double(),
        memory.detach().cpu().double(),
        tgt_mask=tgt_mask,
        memory_mask=memory_mask,
        tgt_key_padding_mask=tgt_key_padding_mask,
        memory_key_padding_mask=memory_key_padding_mask,
    )
    defined = defined_rows(B, T, T, tgt_mask, tgt_key_padding_mask)
    defined &= defined_rows(B, T, S, memory_mask, memory_key_padding_mask)
    return output.detach(), defined


def call_kata(module, name, tgt, memory, **kwargs):
    call = call_repr(name, tgt, memory, **kwargs)
    inputs = {"tgt": tgt, "memory": memory} | {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    return call, call_and_check_inputs(lambda: module(tgt, memory, **kwargs), call, **inputs)


def check(module, reference, name, tgt, memory, **kwargs):
    want, defined = reference_call(reference, tgt, memory, **kwargs)
    call, output = call_kata(module, name, tgt, memory, **kwargs)
    assert_close_where_defined(output, want.to(dtype=tgt.dtype, device=tgt.device), defined, call=call, what="output")


def inputs(gen, case, dtype=torch.float32, device="cpu"):
    """(tgt [B, T, E], memory [B, S, E]); T is the case's L."""
    tgt = randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)
    return tgt, randn(gen, case["B"], case["S"], case["E"], dtype=dtype, device=device)


@LAYOUTS
@ACTIVATIONS
@dtypes(*FULL)
def test_matches_nn_transformer_decoder_layer(kata, rng, gen, norm_first, activation, dtype, device):
    for case in hidden_sizes(rng):
        module, reference, name = build(
            kata, gen, rng, case, dtype, device, norm_first=norm_first, activation=activation
        )
        check(module, reference, name, *inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_tgt_masks_true_block_self_attention(kata, rng, gen, dtype, device):
    """tgt_mask [T, T] alone, then with tgt_key_padding_mask [B, T] (a different length per row)."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        tgt, memory = inputs(gen, case, dtype, device)
        mask = blocked_mask(gen, case["L"], case["L"]).to(device)
        check(module, reference, name, tgt, memory, tgt_mask=mask)
        padding = padding_mask(gen, case["B"], case["L"]).to(device)
        check(module, reference, name, tgt, memory, tgt_mask=mask, tgt_key_padding_mask=padding)


@dtypes(*FULL)
def test_memory_masks_true_block_cross_attention(kata, rng, gen, dtype, device):
    """memory_key_padding_mask [B, S] (a different length per row) alone, then with memory_mask [T, S]."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        tgt, memory = inputs(gen, case, dtype, device)
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        check(module, reference, name, tgt, memory, memory_key_padding_mask=padding)
        mask = blocked_mask(gen, case["L"], case["S"]).to(device)
        check(module, reference, name, tgt, memory, memory_mask=mask, memory_key_padding_mask=padding)


@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        T, S, B = case["L"], case["S"], case["B"]
        masks = {
            "tgt_mask": as_float_mask(gen, blocked_mask(gen, T, T), dtype),
            "memory_mask": as_float_mask(gen, blocked_mask(gen, T, S), dtype),
            "tgt_key_padding_mask": as_float_mask(gen, padding_mask(gen, B, T), dtype),
            "memory_key_padding_mask": as_float_mask(gen, padding_mask(gen, B, S), dtype),
        }
        check(module, reference, name, *inputs(gen, case, dtype), **masks)


@dtypes(*FULL)
def test_tgt_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No tgt_mask needed (PyTorch's layer would want one); with padding on both sides."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        tgt, memory = inputs(gen, case, dtype, device)
        check(module, reference, name, tgt, memory, tgt_is_causal=True)
        paddings = {
            "tgt_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True).to(device),
            "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"]).to(device),
        }
        check(module, reference, name, tgt, memory, tgt_is_causal=True, **paddings)


@dtypes(*FULL)
def test_memory_is_causal_applies_a_causal_mask_to_the_memory(kata, rng, gen, dtype):
    """Target position i sees memory positions 0..i (top-left aligned, T != S)."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype)
        check(module, reference, name, *inputs(gen, case, dtype), memory_is_causal=True)


def test_defaults_match_pytorchs(kata, rng, gen):
    """TransformerDecoderLayer(d_model, nhead): dim_feedforward 2048, ReLU, post-norm, eps 1e-5,
    and dropout 0.1, inactive in eval()."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, rng, case, defaults=True)
    check(module, reference, name, *inputs(gen, case))


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        padding = padding_mask(gen, case["B"], case["S"])
        check(module, reference, name, *inputs(gen, case, dtype), tgt_is_causal=True, memory_key_padding_mask=padding)


def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dropout=0.5)
        check(module, reference, name, *inputs(gen, case), tgt_is_causal=True)


def test_train_mode_applies_dropout(kata, rng, gen, seed):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case, dropout=0.5)
    tgt, memory = inputs(gen, case)
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, second = module(tgt, memory), module(tgt, memory)
    assert_dropout_is_active(first, second, call=call_repr(name.removesuffix(".eval()") + ".train()", tgt, memory))


def test_d_model_not_divisible_by_nhead_raises_value_error(kata, rng):
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    assert_raises_value_error(
        lambda: kata.TransformerDecoderLayer(E, H, dim_feedforward=2 * E),
        call=f"TransformerDecoderLayer(d_model={E}, nhead={H}, dim_feedforward={2 * E})",
        reason=f"d_model {E} cannot be split evenly into {H} heads",
    )


def test_has_the_submodules_of_nn_transformer_decoder_layer(kata, rng, gen):
    """self_attn, multihead_attn (q, k, v, out projections), linear1, linear2, norm1..3,
    with biases exactly when bias=True."""
    case = hidden_sizes(rng)[1]
    for bias in (True, False):
        build(kata, gen, rng, case, bias=bias)


def test_writes_its_own_attention(kata, rng, gen):
    """FORBIDDEN refuses PyTorch's attention while the kata runs; every path of forward runs here."""
    case = hidden_sizes(rng)[1]
    tgt, memory = inputs(gen, case)
    paddings = {
        "tgt_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True),
        "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"]),
    }
    for norm_first in (False, True):
        module, _, name = build(kata, gen, rng, case, dropout=0.1, norm_first=norm_first)
        for mode in (module.eval, module.train):
            mode()
            call_kata(module, name, tgt, memory)
            call_kata(module, name, tgt, memory, tgt_is_causal=True, memory_is_causal=True, **paddings)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """Causal masks made inside forward must be made on the inputs' device."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, rng, case, device=other_device)
    tgt, memory = inputs(gen, case, device=other_device)
    padding = padding_mask(gen, case["B"], case["S"]).to(other_device)
    kwargs = {"memory_key_padding_mask": padding, "tgt_is_causal": True, "memory_is_causal": True}
    if other_device != "meta":
        check(module, reference, name, tgt, memory, **kwargs)
        return
    result = call_on_device(lambda: call_kata(module, name, tgt, memory, **kwargs), other_device)
    if result is not None:  # None: it read tensor values in Python, fine on a real GPU
        call, output = result  # meta tensors have a shape and a device but no values
        check_tensor_kind(output, torch.empty(tgt.shape, device="meta"), call=call, what="output")


def test_prints_nothing(kata, rng, gen, capfd):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case)
    module(*inputs(gen, case), tgt_is_causal=True)
    assert_prints_nothing(capfd, f"{name}(...)")


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, target and memory length 128, d_model 512, 8 heads,
    the default dim_feedforward 2048, post-norm, ReLU, eval() mode, with a causal tgt_mask (a float
    generate_square_subsequent_mask, tgt_is_causal=True, as PyTorch users pass it).
    nn.TransformerDecoderLayer has no fused layer kernel; under the grader's torch.no_grad() its
    self-attention may take nn.MultiheadAttention's inference fast path."""
    B, T, S, E, H = 8, 128, 128, 512, 8
    reference = nn.TransformerDecoderLayer(E, H, batch_first=True, device=device).eval()
    module = kata.TransformerDecoderLayer(E, H)
    load_parameters(module, parameters(reference), what="TransformerDecoderLayer", asks=ASKS)
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
    reference="nn.TransformerDecoderLayer(batch_first=True)",
    forbidden=ATTENTION,
    benchmark=benchmark,
)

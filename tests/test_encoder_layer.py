"""encoder_layer: judged against nn.TransformerEncoderLayer(batch_first=True).

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied by PyTorch's own names, self_attn's packed in_proj split into q_proj, k_proj and
v_proj. Both norm_first settings and both activations are judged, with a non-default
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
ASKS = "self_attn (with q_proj, k_proj, v_proj, out_proj), linear1, linear2, norm1, norm2"
NON_DEFAULT_EPS = [1e-3, 4e-3, 1e-2]
LAYOUTS = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
ACTIVATIONS = pytest.mark.parametrize("activation", ["relu", "gelu"])


def parameters(reference: nn.TransformerEncoderLayer) -> dict[str, torch.Tensor]:
    """The reference's parameters under the kata's names (PyTorch's, in_proj split in three)."""
    names = {name: name for name in ("linear1", "linear2", "norm1", "norm2")}
    return renamed(reference, names) | attention_parameters("self_attn.", reference.self_attn)


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
    name = module_repr("TransformerEncoderLayer", d_model=E, nhead=H, **options)
    settings = {k: v for k, v in options.items() if k != "dropout"}
    reference = nn.TransformerEncoderLayer(E, H, **settings, dropout=0.0, batch_first=True, dtype=torch.float64)
    randomise_(reference, gen, dtype)
    module = kata.TransformerEncoderLayer(E, H, **options).to(dtype)
    load_parameters(module, parameters(reference), what="TransformerEncoderLayer", asks=ASKS, built=name)
    return module.to(device).eval(), reference, name + ".eval()" if defaults or dropout else name


def reference_call(reference, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
    """The reference in float64 on the CPU (masks made explicit): (output, defined rows)."""
    B, S = src.size(0), src.size(1)
    src_mask, src_key_padding_mask = reference_masks(src_mask, src_key_padding_mask, S, S, is_causal)
    output = reference(src.detach().cpu().double(), src_mask=src_mask, src_key_padding_mask=src_key_padding_mask)
    return output.detach(), defined_rows(B, S, S, src_mask, src_key_padding_mask)


def call_kata(module, name, src, **kwargs):
    call = call_repr(name, src, **kwargs)
    inputs = {"src": src} | {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    return call, call_and_check_inputs(lambda: module(src, **kwargs), call, **inputs)


def check(module, reference, name, src, **kwargs):
    want, defined = reference_call(reference, src, **kwargs)
    call, output = call_kata(module, name, src, **kwargs)
    assert_close_where_defined(output, want.to(dtype=src.dtype, device=src.device), defined, call=call, what="output")


def inputs(gen, case, dtype=torch.float32, device="cpu"):
    return randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)


@LAYOUTS
@ACTIVATIONS
@dtypes(*FULL)
def test_matches_nn_transformer_encoder_layer(kata, rng, gen, norm_first, activation, dtype, device):
    for case in hidden_sizes(rng):
        module, reference, name = build(
            kata, gen, rng, case, dtype, device, norm_first=norm_first, activation=activation
        )
        check(module, reference, name, inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_src_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, S], a different number of padded keys per batch row."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        padding = padding_mask(gen, case["B"], case["L"]).to(device)
        check(module, reference, name, inputs(gen, case, dtype, device), src_key_padding_mask=padding)


@dtypes(*FULL)
def test_src_mask_true_blocks_that_query_key_pair(kata, rng, gen, dtype, device):
    """[S, S], alone and together with a src_key_padding_mask."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        src = inputs(gen, case, dtype, device)
        mask = blocked_mask(gen, case["L"], case["L"]).to(device)
        check(module, reference, name, src, src_mask=mask)
        padding = padding_mask(gen, case["B"], case["L"]).to(device)
        check(module, reference, name, src, src_mask=mask, src_key_padding_mask=padding)


@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        mask = as_float_mask(gen, blocked_mask(gen, case["L"], case["L"]), dtype)
        padding = as_float_mask(gen, padding_mask(gen, case["B"], case["L"]), dtype)
        check(module, reference, name, inputs(gen, case, dtype), src_mask=mask, src_key_padding_mask=padding)


@dtypes(*FULL)
def test_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No src_mask needed (PyTorch's layer would want one); with and without padding."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        src = inputs(gen, case, dtype, device)
        check(module, reference, name, src, is_causal=True)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
        check(module, reference, name, src, src_key_padding_mask=padding, is_causal=True)


def test_defaults_match_pytorchs(kata, rng, gen):
    """TransformerEncoderLayer(d_model, nhead): dim_feedforward 2048, ReLU, post-norm, eps 1e-5,
    and dropout 0.1, inactive in eval()."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, rng, case, defaults=True)
    check(module, reference, name, inputs(gen, case))


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True)
        check(module, reference, name, inputs(gen, case, dtype), src_key_padding_mask=padding, is_causal=True)


def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dropout=0.5)
        padding = padding_mask(gen, case["B"], case["L"])
        check(module, reference, name, inputs(gen, case), src_key_padding_mask=padding)


def test_train_mode_applies_dropout(kata, rng, gen, seed):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case, dropout=0.5)
    src = inputs(gen, case)
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, second = module(src), module(src)
    assert_dropout_is_active(first, second, call=call_repr(name.removesuffix(".eval()") + ".train()", src))


def test_d_model_not_divisible_by_nhead_raises_value_error(kata, rng):
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    assert_raises_value_error(
        lambda: kata.TransformerEncoderLayer(E, H, dim_feedforward=2 * E),
        call=f"TransformerEncoderLayer(d_model={E}, nhead={H}, dim_feedforward={2 * E})",
        reason=f"d_model {E} cannot be split evenly into {H} heads",
    )


def test_has_the_submodules_of_nn_transformer_encoder_layer(kata, rng, gen):
    """self_attn.{q,k,v,out}_proj, linear1, linear2, norm1, norm2, with biases exactly when bias=True."""
    case = hidden_sizes(rng)[1]
    for bias in (True, False):
        build(kata, gen, rng, case, bias=bias)


def test_writes_its_own_attention(kata, rng, gen):
    """FORBIDDEN refuses PyTorch's attention while the kata runs; every path of forward runs here."""
    case = hidden_sizes(rng)[1]
    src = inputs(gen, case)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True)
    for norm_first in (False, True):
        module, _, name = build(kata, gen, rng, case, dropout=0.1, norm_first=norm_first)
        for mode in (module.eval, module.train):
            mode()
            call_kata(module, name, src)
            call_kata(module, name, src, src_key_padding_mask=padding, is_causal=True)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """A causal mask made inside forward must be made on the input's device."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, rng, case, device=other_device)
    src = inputs(gen, case, device=other_device)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(other_device)
    kwargs = {"src_key_padding_mask": padding, "is_causal": True}
    if other_device != "meta":
        check(module, reference, name, src, **kwargs)
        return
    result = call_on_device(lambda: call_kata(module, name, src, **kwargs), other_device)
    if result is not None:  # None: it read tensor values in Python, fine on a real GPU
        call, output = result  # meta tensors have a shape and a device but no values
        check_tensor_kind(output, torch.empty(src.shape, device="meta"), call=call, what="output")


def test_prints_nothing(kata, rng, gen, capfd):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case)
    module(inputs(gen, case), is_causal=True)
    assert_prints_nothing(capfd, f"{name}(...)")


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, length 128, d_model 512, 8 heads, the default
    dim_feedforward 2048, post-norm, ReLU, eval() mode, with a src_key_padding_mask (lengths
    128 down to 72). Under the grader's torch.no_grad() the reference takes
    nn.TransformerEncoderLayer's fused inference fast path (_transformer_encoder_layer_fwd),
    what PyTorch users run for inference."""
    B, S, E, H = 8, 128, 512, 8
    reference = nn.TransformerEncoderLayer(E, H, batch_first=True, device=device).eval()
    module = kata.TransformerEncoderLayer(E, H)
    load_parameters(module, parameters(reference), what="TransformerEncoderLayer", asks=ASKS)
    module.to(device).eval()
    src = randn(torch.Generator().manual_seed(0), B, S, E, device=device)
    lengths = torch.arange(S, S - 8 * B, -8, device=device)
    padding = torch.arange(S, device=device)[None, :] >= lengths[:, None]
    return (lambda: module(src, src_key_padding_mask=padding)), (lambda: reference(src, src_key_padding_mask=padding))


SPEC = KataSpec(
    kata="encoder_layer",
    symbol="TransformerEncoderLayer",
    reference="nn.TransformerEncoderLayer(batch_first=True)",
    forbidden=ATTENTION,
    benchmark=benchmark,
)

"""causal_lm_block: judged against nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True) with a causal mask.

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied into the learner's GPT-2 names: norm1 -> ln_1, self_attn -> attn (its packed
in_proj split into q_proj, k_proj, v_proj), norm2 -> ln_2, linear1 -> mlp.up_proj,
linear2 -> mlp.down_proj. The reference runs in float64 (see module_testing).
"""

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
from judge.testing.inputs import as_float_mask, causal_blocked, padding_mask, randn
from judge.testing.modules import (
    MODULE_TOLERANCES,
    assert_close_where_defined,
    assert_dropout_is_active,
    attention_parameters,
    defined_rows,
    hidden_sizes,
    load_parameters,
    module_repr,
    randomise_,
    renamed,
)
from judge.testing.spec import KataSpec, dtypes

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
ASKS = "ln_1, attn (with q_proj, k_proj, v_proj, out_proj), ln_2, mlp (with up_proj, down_proj)"
NON_DEFAULT_EPS = [1e-3, 4e-3, 1e-2]


def build(kata, gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, dropout=0.0, bias=None):
    """(the learner's block, the float64 reference, how the block was built).

    Non-default d_ff and eps unless `defaults`; then only (d_model, num_heads) are passed
    and the block stays in train() mode, which with the default dropout 0 changes nothing."""
    E, H = case["E"], case["H"]
    bias = rng.random() < 0.7 if bias is None else bias
    options = {} if defaults else {"d_ff": case["F"], "layer_norm_eps": rng.choice(NON_DEFAULT_EPS)}
    options |= ({"dropout": dropout} if dropout else {}) | ({} if bias else {"bias": False})
    name = module_repr("CausalLMBlock", d_model=E, num_heads=H, **options)
    reference = nn.TransformerEncoderLayer(
        E,
        H,
        dim_feedforward=options.get("d_ff", 4 * E),
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=options.get("layer_norm_eps", 1e-5),
        batch_first=True,
        norm_first=True,
        bias=bias,
        dtype=torch.float64,
    )
    randomise_(reference, gen, dtype)
    expected = renamed(
        reference, {"norm1": "ln_1", "norm2": "ln_2", "linear1": "mlp.up_proj", "linear2": "mlp.down_proj"}
    )
    expected |= attention_parameters("attn.", reference.self_attn)
    module = kata.CausalLMBlock(E, H, **options).to(dtype)
    load_parameters(module, expected, what="CausalLMBlock", asks=ASKS, built=name)
    module.to(device)
    return (module if defaults else module.eval()), reference, name


def reference_call(reference, x, key_padding_mask=None):
    """The reference in float64 on the CPU, with the causal mask passed explicitly:
    (output, defined rows)."""
    T = x.size(1)
    causal = causal_blocked(T, T)
    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.cpu()
        if key_padding_mask.is_floating_point():  # PyTorch wants both masks of one kind
            key_padding_mask = key_padding_mask.double()
            causal = torch.zeros(T, T, dtype=torch.float64).masked_fill(causal, float("-inf"))
    output = reference(x.detach().cpu().double(), src_mask=causal, src_key_padding_mask=key_padding_mask)
    return output.detach(), defined_rows(x.size(0), T, T, causal, key_padding_mask)


def call_kata(module, name, x, **kwargs):
    call = call_repr(name, x, **kwargs)
    inputs = {"x": x} | {k: v for k, v in kwargs.items() if v is not None}
    return call, call_and_check_inputs(lambda: module(x, **kwargs), call, **inputs)


def check(module, reference, name, x, **kwargs):
    want, defined = reference_call(reference, x, **kwargs)
    call, output = call_kata(module, name, x, **kwargs)
    assert_close_where_defined(output, want.to(dtype=x.dtype, device=x.device), defined, call=call, what="output")


def inputs(gen, case, dtype=torch.float32, device="cpu"):
    return randn(gen, case["B"], case["L"], case["E"], dtype=dtype, device=device)


@dtypes(*FULL)
def test_matches_pre_norm_transformer_encoder_layer_with_a_causal_mask(kata, rng, gen, dtype, device):
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        check(module, reference, name, inputs(gen, case, dtype, device))


@dtypes(*FULL)
def test_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, T], right-padded, a different length per batch row."""
    for case in hidden_sizes(rng):
        module, reference, name = build(kata, gen, rng, case, dtype, device)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(device)
        check(module, reference, name, inputs(gen, case, dtype, device), key_padding_mask=padding)


@dtypes(*FULL)
def test_float_key_padding_mask_is_added_to_the_scores(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        padding = as_float_mask(gen, padding_mask(gen, case["B"], case["L"], right_only=True), dtype)
        check(module, reference, name, inputs(gen, case, dtype), key_padding_mask=padding)


def test_defaults_are_d_ff_4_d_model_no_dropout_and_eps_1e_5(kata, rng, gen):
    """CausalLMBlock(d_model, num_heads) in train() mode: the defaults must hold."""
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, defaults=True)
        check(module, reference, name, inputs(gen, case))


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dtype)
        padding = padding_mask(gen, case["B"], case["L"], right_only=True)
        check(module, reference, name, inputs(gen, case, dtype), key_padding_mask=padding)


def test_later_positions_do_not_change_earlier_outputs(kata, rng, gen):
    """Causality on its own: change x from position t on; outputs before t must not move."""
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case)
    x = inputs(gen, case)
    T = case["L"]
    t = rng.randrange(1, T)
    changed = x.clone()
    changed[:, t:] = randn(gen, case["B"], T - t, case["E"])
    call, before = call_kata(module, name, x)
    _, after = call_kata(module, name, changed)
    moved = (before[:, :t] - after[:, :t]).abs().amax(dim=(0, 2)) > MODULE_TOLERANCES[torch.float32]["atol"]
    if moved.any():
        p = int(moved.nonzero()[0])
        raise AssertionError(
            f"{call}: changing x at positions {t}..{T - 1} only changed the output at position {p} < {t}; "
            "position p may attend to positions 0..p only (block key j > query i)"
        )


def test_eval_mode_disables_dropout(kata, rng, gen):
    for case in hidden_sizes(rng, count=2):
        module, reference, name = build(kata, gen, rng, case, dropout=0.5)
        check(module, reference, name + ".eval()", inputs(gen, case))


def test_train_mode_applies_dropout(kata, rng, gen, seed):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case, dropout=0.5)
    x = inputs(gen, case)
    module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, second = module(x), module(x)
    assert_dropout_is_active(first, second, call=call_repr(name + ".train()", x))


def test_d_model_not_divisible_by_num_heads_raises_value_error(kata, rng):
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    assert_raises_value_error(
        lambda: kata.CausalLMBlock(E, H),
        call=f"CausalLMBlock(d_model={E}, num_heads={H})",
        reason=f"d_model {E} cannot be split evenly into {H} heads",
    )


def test_has_the_submodules_of_a_gpt2_block(kata, rng, gen):
    """ln_1, attn.{q,k,v,out}_proj, ln_2, mlp.{up,down}_proj, with biases exactly when bias=True."""
    case = hidden_sizes(rng)[1]
    for bias in (True, False):
        build(kata, gen, rng, case, bias=bias)


def test_writes_its_own_attention(kata, rng, gen):
    """FORBIDDEN refuses PyTorch's attention while the kata runs; every path of forward runs here."""
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case, dropout=0.1)
    x = inputs(gen, case)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True)
    for mode in (module.eval, module.train):
        mode()
        call_kata(module, name, x)
        call_kata(module, name, x, key_padding_mask=padding)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """The causal mask made inside forward must be made on the input's device."""
    case = hidden_sizes(rng)[1]
    module, reference, name = build(kata, gen, rng, case, device=other_device)
    x = inputs(gen, case, device=other_device)
    padding = padding_mask(gen, case["B"], case["L"], right_only=True).to(other_device)
    if other_device != "meta":
        check(module, reference, name, x, key_padding_mask=padding)
        return
    result = call_on_device(lambda: call_kata(module, name, x, key_padding_mask=padding), other_device)
    if result is not None:  # None: it read tensor values in Python, fine on a real GPU
        call, output = result  # meta tensors have a shape and a device but no values
        check_tensor_kind(output, torch.empty(x.shape, device="meta"), call=call, what="output")


def test_prints_nothing(kata, rng, gen, capfd):
    case = hidden_sizes(rng)[1]
    module, _, name = build(kata, gen, rng, case)
    module(inputs(gen, case))
    assert_prints_nothing(capfd, f"{name}(...)")


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, length 128, d_model 512, 8 heads, d_ff 2048, in
    eval() mode. The reference gets the causal mask as PyTorch users pass it (a float
    generate_square_subsequent_mask, is_causal=True) and, under the grader's torch.no_grad(),
    takes nn.TransformerEncoderLayer's fused inference fast path (_transformer_encoder_layer_fwd)."""
    B, T, C, H = 8, 128, 512, 8
    reference = nn.TransformerEncoderLayer(
        C, H, 4 * C, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, device=device
    ).eval()
    expected = renamed(
        reference, {"norm1": "ln_1", "norm2": "ln_2", "linear1": "mlp.up_proj", "linear2": "mlp.down_proj"}
    )
    module = kata.CausalLMBlock(C, H)
    load_parameters(
        module, expected | attention_parameters("attn.", reference.self_attn), what="CausalLMBlock", asks=ASKS
    )
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(T, device=torch.device(device))
    return (lambda: module(x)), (lambda: reference(x, src_mask=mask, is_causal=True))


SPEC = KataSpec(
    kata="causal_lm_block",
    symbol="CausalLMBlock",
    reference="nn.TransformerEncoderLayer(norm_first=True, activation='gelu') with a causal mask",
    forbidden=ATTENTION,
    benchmark=benchmark,
)

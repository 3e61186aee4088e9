"""decoder_layer: judged against nn.TransformerDecoderLayer(batch_first=True).

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied by PyTorch's own names, the packed in_proj of self_attn and multihead_attn split
into q_proj, k_proj and v_proj. The memory is longer or shorter than the target (S != T).
Both norm_first settings and both activations are judged, with a non-default
layer_norm_eps. The reference runs in float64 (see judge.testing.modules); the learner's
layer is built from a recipe and called where the kata lives (judge.testing.layers runs
what every layer kata checks alike).
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import modules
from judge.testing.inputs import blocked_mask, padding_mask, randn
from judge.testing.layers import (
    ACTIVATIONS,
    DROPOUT,
    FULL,
    HALF,
    HALF_PRECISION,
    LAYOUTS,
    PYTORCH_DEFAULTS,
    Layer,
    floats,
    pytorch_layer,
    tensor,
)
from judge.testing.modules import (
    CASES,
    ModuleKata,
    attention_parameters,
    defined_rows,
    layer_attention_probe,
    reference_masks,
    renamed,
)
from judge.testing.spec import FLOAT64_RULE, KataSpec, dtypes
from judge.testing.tiers import convention, core


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


DECODER = Layer(
    ModuleKata(
        kata="decoder_layer",
        cls="TransformerDecoderLayer",
        asks=pick(
            "self_attn and multihead_attn (each with q_proj, k_proj, v_proj, out_proj), linear1, linear2, norm1, norm2, norm3",
            "self_attn 和 multihead_attn（各含 q_proj、k_proj、v_proj、out_proj）、linear1、linear2、norm1、norm2、norm3",
        ),
        inputs=("tgt", "memory"),
        reference=pytorch_layer(nn.TransformerDecoderLayer),
        parameters=parameters,
        arguments=lambda case, options: ({"d_model": case["E"], "nhead": case["H"]}, options),
        forward=reference_forward,
        probes=(
            layer_attention_probe("self_attn"),
            layer_attention_probe("multihead_attn"),
        ),
    ),
    tensors=lambda gen, case, dtype, device: {
        "tgt": tensor(gen, case, "L", dtype, device),
        "memory": tensor(gen, case, "S", dtype, device),
    },
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
    tolerances=DECODER.mk.tolerances,
    tolerance_note="a layer chains matmuls, a softmax and LayerNorms: a LayerNorm over d_model 2 takes the solution to 0.55 of these in float32",
    cases=CASES,
    benchmark=benchmark,
)


def paddings(gen, case, device, *, right_only=False) -> dict:
    """A tgt_key_padding_mask [B, T] (right-padded if `right_only`) and a
    memory_key_padding_mask [B, S], a different length per batch row."""
    B, T, S = case["B"], case["L"], case["S"]
    return {
        "tgt_key_padding_mask": padding_mask(gen, B, T, right_only=right_only).to(device),
        "memory_key_padding_mask": padding_mask(gen, B, S).to(device),
    }


def both_causal(gen, case, dtype, device) -> list[dict]:
    """Both sides causal, both padded."""
    return [{"tgt_is_causal": True, "memory_is_causal": True} | paddings(gen, case, device, right_only=True)]


def tgt_causal(gen, case, dtype, device) -> list[dict]:
    return [{"tgt_is_causal": True} | paddings(gen, case, device, right_only=True)]


@core(zh="与 nn.TransformerDecoderLayer 一致")
@LAYOUTS
@ACTIVATIONS
@dtypes(*FULL)
def test_matches_nn_transformer_decoder_layer(kata, rng, gen, norm_first, activation, dtype, device):
    DECODER.judge(kata, rng, gen, dtype, device, norm_first=norm_first, activation=activation)


@core(zh="tgt 掩码为 True 处屏蔽自注意力")
@dtypes(*FULL)
def test_tgt_masks_true_block_self_attention(kata, rng, gen, dtype, device):
    """tgt_mask [T, T] alone, then with tgt_key_padding_mask [B, T] (a different length per row)."""

    def masks(gen, case, dtype, device):
        mask = blocked_mask(gen, case["L"], case["L"]).to(device)
        padding = padding_mask(gen, case["B"], case["L"]).to(device)
        return [{"tgt_mask": mask}, {"tgt_mask": mask, "tgt_key_padding_mask": padding}]

    DECODER.judge(kata, rng, gen, dtype, device, masks=masks)


@core(zh="memory 掩码为 True 处屏蔽交叉注意力")
@dtypes(*FULL)
def test_memory_masks_true_block_cross_attention(kata, rng, gen, dtype, device):
    """memory_key_padding_mask [B, S] (a different length per row) alone, then with memory_mask [T, S]."""

    def masks(gen, case, dtype, device):
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        mask = blocked_mask(gen, case["L"], case["S"]).to(device)
        return [{"memory_key_padding_mask": padding}, {"memory_mask": mask, "memory_key_padding_mask": padding}]

    DECODER.judge(kata, rng, gen, dtype, device, masks=masks)


@core(zh="浮点掩码加到注意力分数上")
@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype):
    DECODER.judge(
        kata, rng, gen, dtype, masks=lambda gen, case, dtype, _: [floats(gen, all_masks(gen, case), dtype)], draws=2
    )


@core(zh="tgt_is_causal 自行施加因果掩码")
@dtypes(*FULL)
def test_tgt_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No tgt_mask needed (PyTorch's layer would want one); with padding on both sides."""
    DECODER.judge(kata, rng, gen, dtype, device, masks=lambda *a: [{"tgt_is_causal": True}, *tgt_causal(*a)])


@core(zh="memory_is_causal 对 memory 施加因果掩码")
@dtypes(*FULL)
def test_memory_is_causal_applies_a_causal_mask_to_the_memory(kata, rng, gen, dtype):
    """Target position i sees memory positions 0..i (top-left aligned, T != S)."""
    DECODER.judge(kata, rng, gen, dtype, masks=lambda *_: [{"memory_is_causal": True}])


@core(zh="is_causal 与掩码同时生效")
@dtypes(*FULL)
def test_is_causal_and_masks_both_apply(kata, rng, gen, dtype):
    """tgt_is_causal with tgt_mask, memory_is_causal with memory_mask: a key is blocked when
    either blocks it (boolean and float masks)."""

    def masks(gen, case, dtype, device):
        T, S = case["L"], case["S"]
        tgt_mask, memory_mask = blocked_mask(gen, T, T), blocked_mask(gen, T, S)
        causal = {"tgt_is_causal": True, "memory_is_causal": True}
        as_floats = floats(gen, {"tgt_mask": tgt_mask, "memory_mask": memory_mask}, dtype)
        return [
            {"tgt_mask": tgt_mask, "tgt_is_causal": True},
            {"memory_mask": memory_mask, "memory_is_causal": True},
            causal | as_floats,
        ]

    DECODER.judge(kata, rng, gen, dtype, masks=masks, draws=2)


@core(zh="具有 nn.TransformerDecoderLayer 的各个子模块")
def test_has_the_submodules_of_nn_transformer_decoder_layer(kata, rng, gen):
    """self_attn, multihead_attn (q, k, v, out projections), linear1, linear2, norm1..3,
    with biases exactly when bias=True."""
    DECODER.has_its_submodules(kata, rng, gen)


@core(zh="自己实现注意力")
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; every path
    of forward runs here, in eval() and train() mode."""
    DECODER.writes_its_own_attention(kata, rng, gen, both_causal, layouts=(False, True))


@convention(PYTORCH_DEFAULTS, zh="默认值与 PyTorch 一致")
def test_defaults_match_pytorchs(kata, rng, gen):
    """TransformerDecoderLayer(d_model, nhead): dim_feedforward 2048, ReLU, post-norm, eps 1e-5,
    and dropout 0.1, inactive in eval()."""
    DECODER.keeps_its_defaults(kata, rng, gen)


@convention(HALF_PRECISION, zh="在半精度下也能工作")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    def masks(gen, case, dtype, device):
        return [{"tgt_is_causal": True, "memory_key_padding_mask": padding_mask(gen, case["B"], case["S"])}]

    DECODER.works_in_half_precision(kata, rng, gen, dtype, masks)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    DECODER.computes_float64_in_float64(kata, rng, gen, tgt_causal)


@convention(DROPOUT, zh="eval() 模式下关闭 dropout")
def test_eval_mode_disables_dropout(kata, rng, gen):
    DECODER.eval_disables_dropout(kata, rng, gen, lambda *_: [{"tgt_is_causal": True}])


@convention("dropout: ... in train() mode only", zh="train() 模式下启用 dropout")
def test_train_mode_applies_dropout(kata, rng, gen):
    DECODER.train_applies_dropout(kata, rng, gen)


@convention("raise ValueError when d_model is not divisible by nhead.", zh="d_model 不能被 nhead 整除时抛出 ValueError")
def test_d_model_not_divisible_by_nhead_raises_value_error(kata, rng):
    modules.check_heads_must_divide(DECODER.mk, kata, rng, "d_model", "nhead", dim_feedforward=lambda E: 2 * E)


@convention("results follow the inputs' device (causal masks made inside forward too).", zh="结果位于输入所在的设备上")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """Causal masks made inside forward must be made on the inputs' device."""

    def masks(gen, case, dtype, device):
        padding = padding_mask(gen, case["B"], case["S"]).to(device)
        return [{"memory_key_padding_mask": padding, "tgt_is_causal": True, "memory_is_causal": True}]

    DECODER.follows_the_device(kata, other_device, masks, {"dim_feedforward": "F"})


def all_masks(gen, case) -> dict:
    """All four masks, boolean: tgt_mask [T, T], memory_mask [T, S] and both paddings."""
    T, S = case["L"], case["S"]
    return {"tgt_mask": blocked_mask(gen, T, T), "memory_mask": blocked_mask(gen, T, S)} | paddings(gen, case, "cpu")


@convention("the inputs and masks are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """All four masks, boolean and float, in both layouts."""
    causal = {"tgt_is_causal": True, "memory_is_causal": True}
    DECODER.leaves_its_inputs_alone(kata, rng, gen, all_masks, causal, layouts=(False, True))

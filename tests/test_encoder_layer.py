"""encoder_layer: judged against nn.TransformerEncoderLayer(batch_first=True).

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied by PyTorch's own names, self_attn's packed in_proj split into q_proj, k_proj and
v_proj. Both norm_first settings and both activations are judged, with a non-default
layer_norm_eps. The reference runs in float64 (see judge.testing.modules); the learner's
layer is built from a recipe and called where the kata lives (judge.testing.layers runs
what every layer kata checks alike).
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import modules
from judge.testing.inputs import as_float_mask, blocked_mask, padding_mask, randn
from judge.testing.layers import (
    ACTIVATIONS,
    DROPOUT,
    FULL,
    HALF,
    HALF_PRECISION,
    LAYOUTS,
    PYTORCH_DEFAULTS,
    Layer,
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


def parameters(reference: nn.TransformerEncoderLayer) -> dict[str, torch.Tensor]:
    """The reference's parameters under the kata's names (PyTorch's, in_proj split in three)."""
    names = {name: name for name in ("linear1", "linear2", "norm1", "norm2")}
    return renamed(reference, names) | attention_parameters("self_attn.", reference.self_attn)


def reference_forward(reference, inputs, kwargs):
    """The reference with its masks made explicit: ({output}, defined rows)."""
    src = inputs["src"]
    B, S = src.size(0), src.size(1)
    src_mask, padding = reference_masks(
        kwargs.get("src_mask"), kwargs.get("src_key_padding_mask"), S, S, kwargs.get("is_causal", False)
    )
    output = reference(src, src_mask=src_mask, src_key_padding_mask=padding)
    return {"output": output.detach()}, defined_rows(B, S, S, src_mask, padding)


ENCODER = Layer(
    ModuleKata(
        kata="encoder_layer",
        cls="TransformerEncoderLayer",
        asks=pick(
            "self_attn (with q_proj, k_proj, v_proj, out_proj), linear1, linear2, norm1, norm2",
            "self_attn（含 q_proj、k_proj、v_proj、out_proj）、linear1、linear2、norm1、norm2",
        ),
        inputs=("src",),
        reference=pytorch_layer(nn.TransformerEncoderLayer),
        parameters=parameters,
        arguments=lambda case, options: ({"d_model": case["E"], "nhead": case["H"]}, options),
        forward=reference_forward,
        probes=(layer_attention_probe("self_attn"),),
    ),
    tensors=lambda gen, case, dtype, device: {"src": tensor(gen, case, "L", dtype, device)},
)


def benchmark(kata, device):
    """(kata call, reference call) at batch 8, length 128, d_model 512, 8 heads, the default
    dim_feedforward 2048, post-norm, ReLU, eval() mode, with a src_key_padding_mask (lengths
    128 down to 72). Under the grader's torch.no_grad() the reference takes
    nn.TransformerEncoderLayer's fused inference fast path (_transformer_encoder_layer_fwd),
    what PyTorch users run for inference."""
    B, S, E, H = 8, 128, 512, 8
    reference = nn.TransformerEncoderLayer(E, H, batch_first=True, device=device).eval()
    module = kata.TransformerEncoderLayer(E, H)
    modules.load_state(module, parameters(reference))
    module.to(device).eval()
    src = randn(torch.Generator().manual_seed(0), B, S, E, device=device)
    lengths = torch.arange(S, S - 8 * B, -8, device=device)
    padding = torch.arange(S, device=device)[None, :] >= lengths[:, None]
    return (lambda: module(src, src_key_padding_mask=padding)), (lambda: reference(src, src_key_padding_mask=padding))


SPEC = KataSpec(
    kata="encoder_layer",
    symbol="TransformerEncoderLayer",
    reference="nn.TransformerEncoderLayer(batch_first=True) in float64, its parameters copied in",
    forbidden=ATTENTION,
    tolerances=ENCODER.mk.tolerances,
    tolerance_note="a layer chains matmuls, a softmax and LayerNorms: a LayerNorm over d_model 2 takes the solution to 0.55 of these in float32",
    cases=CASES,
    benchmark=benchmark,
)


def padded(gen, case, dtype, device, *, right_only=False) -> list[dict]:
    """A src_key_padding_mask [B, S], a different number of padded keys per batch row."""
    return [{"src_key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=right_only).to(device)}]


def padded_causal(gen, case, dtype, device) -> list[dict]:
    return [padded(gen, case, dtype, device, right_only=True)[0] | {"is_causal": True}]


@core(zh="与 nn.TransformerEncoderLayer 一致")
@LAYOUTS
@ACTIVATIONS
@dtypes(*FULL)
def test_matches_nn_transformer_encoder_layer(kata, rng, gen, norm_first, activation, dtype, device):
    ENCODER.judge(kata, rng, gen, dtype, device, norm_first=norm_first, activation=activation)


@core(zh="src_key_padding_mask 为 True 的键被忽略")
@dtypes(*FULL)
def test_src_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, S], a different number of padded keys per batch row."""
    ENCODER.judge(kata, rng, gen, dtype, device, masks=padded)


@core(zh="src_mask 为 True 处屏蔽该查询-键对")
@dtypes(*FULL)
def test_src_mask_true_blocks_that_query_key_pair(kata, rng, gen, dtype, device):
    """[S, S], alone and together with a src_key_padding_mask."""

    def masks(gen, case, dtype, device):
        mask = blocked_mask(gen, case["L"], case["L"]).to(device)
        return [{"src_mask": mask}, {"src_mask": mask} | padded(gen, case, dtype, device)[0]]

    ENCODER.judge(kata, rng, gen, dtype, device, masks=masks)


@core(zh="浮点掩码加到注意力分数上")
@dtypes(*FULL)
def test_float_masks_are_added_to_the_scores(kata, rng, gen, dtype):
    def masks(gen, case, dtype, device):
        mask = as_float_mask(gen, blocked_mask(gen, case["L"], case["L"]), dtype)
        return [
            {
                "src_mask": mask,
                "src_key_padding_mask": as_float_mask(gen, padding_mask(gen, case["B"], case["L"]), dtype),
            }
        ]

    ENCODER.judge(kata, rng, gen, dtype, masks=masks, draws=2)


@core(zh="is_causal 自行施加因果掩码")
@dtypes(*FULL)
def test_is_causal_applies_a_causal_mask_by_itself(kata, rng, gen, dtype, device):
    """No src_mask needed (PyTorch's layer would want one); with and without padding."""
    ENCODER.judge(kata, rng, gen, dtype, device, masks=lambda *a: [{"is_causal": True}, *padded_causal(*a)])


@core(zh="is_causal 与 src_mask 同时生效")
@dtypes(*FULL)
def test_is_causal_and_src_mask_both_apply(kata, rng, gen, dtype):
    """Given together, a key is blocked when either blocks it (boolean and float masks)."""

    def masks(gen, case, dtype, device):
        mask = blocked_mask(gen, case["L"], case["L"])
        return [{"src_mask": mask, "is_causal": True}, {"src_mask": as_float_mask(gen, mask, dtype), "is_causal": True}]

    ENCODER.judge(kata, rng, gen, dtype, masks=masks, draws=2)


@core(zh="具有 nn.TransformerEncoderLayer 的各个子模块")
def test_has_the_submodules_of_nn_transformer_encoder_layer(kata, rng, gen):
    """self_attn.{q,k,v,out}_proj, linear1, linear2, norm1, norm2, with biases exactly when bias=True."""
    ENCODER.has_its_submodules(kata, rng, gen)


@core(zh="自己实现注意力")
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; every path
    of forward runs here, in eval() and train() mode."""
    ENCODER.writes_its_own_attention(kata, rng, gen, padded_causal, layouts=(False, True))


@convention(PYTORCH_DEFAULTS, zh="默认值与 PyTorch 一致")
def test_defaults_match_pytorchs(kata, rng, gen):
    """TransformerEncoderLayer(d_model, nhead): dim_feedforward 2048, ReLU, post-norm, eps 1e-5,
    and dropout 0.1, inactive in eval()."""
    ENCODER.keeps_its_defaults(kata, rng, gen)


@convention(HALF_PRECISION, zh="在半精度下也能工作")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    ENCODER.works_in_half_precision(kata, rng, gen, dtype, padded_causal)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    ENCODER.computes_float64_in_float64(kata, rng, gen, padded_causal)


@convention(DROPOUT, zh="eval() 模式下关闭 dropout")
def test_eval_mode_disables_dropout(kata, rng, gen):
    ENCODER.eval_disables_dropout(kata, rng, gen, padded)


@convention("dropout: ... in train() mode only", zh="train() 模式下启用 dropout")
def test_train_mode_applies_dropout(kata, rng, gen):
    ENCODER.train_applies_dropout(kata, rng, gen)


@convention("raise ValueError when d_model is not divisible by nhead.", zh="d_model 不能被 nhead 整除时抛出 ValueError")
def test_d_model_not_divisible_by_nhead_raises_value_error(kata, rng):
    modules.check_heads_must_divide(ENCODER.mk, kata, rng, "d_model", "nhead", dim_feedforward=lambda E: 2 * E)


@convention("results follow the inputs' device (a causal mask made inside forward too).", zh="结果位于输入所在的设备上")
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """A causal mask made inside forward must be made on the input's device."""
    ENCODER.follows_the_device(kata, other_device, padded_causal, {"dim_feedforward": "F"})


@convention("the inputs and masks are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """Boolean and float masks of both kinds, in both layouts."""

    def masks(gen, case):
        return {
            "src_key_padding_mask": padding_mask(gen, case["B"], case["L"]),
            "src_mask": blocked_mask(gen, case["L"], case["L"]),
        }

    ENCODER.leaves_its_inputs_alone(kata, rng, gen, masks, {"is_causal": True}, layouts=(False, True))

"""causal_lm_block: judged against nn.TransformerEncoderLayer(norm_first=True, activation="gelu",
batch_first=True) with a causal mask.

Every parameter of the reference is random (LayerNorm weights and biases included) and is
copied into the learner's GPT-2 names: norm1 -> ln_1, self_attn -> attn (its packed
in_proj split into q_proj, k_proj, v_proj), norm2 -> ln_2, linear1 -> mlp.up_proj,
linear2 -> mlp.down_proj. The reference runs in float64 (see judge.testing.modules); the
learner's block is built from a recipe and called where the kata lives.
"""

import torch
from torch import nn

from judge.forbidden import ATTENTION
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import call_repr, check_tensor_kind
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import causal_blocked, padding_mask, randn
from judge.testing.layers import DROPOUT, FULL, HALF, HALF_PRECISION, Layer, floats, tensor
from judge.testing.modules import (
    CASES,
    MODULE_TOLERANCES,
    ModuleKata,
    Probe,
    attention_parameters,
    defined_rows,
    renamed,
)
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, KataSpec, dtypes
from judge.testing.tiers import convention, core

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


def block_options(rng, case, *, defaults=False, dropout=0.0, bias=None) -> dict:
    """Non-default d_ff and eps unless `defaults`; then only (d_model, num_heads) are passed
    and the block stays in train() mode, which with the default dropout 0 changes nothing."""
    bias = rng.random() < 0.7 if bias is None else bias
    options = {} if defaults else {"d_ff": case["F"], "layer_norm_eps": rng.choice(modules.NON_DEFAULT_EPS)}
    return options | ({"dropout": dropout} if dropout else {}) | ({} if bias else {"bias": False})


def call_attention_as_the_block_does(attn, args: list, kwargs: dict):
    """The learner's attn called as its block calls it, attn(x, key_padding_mask), on the
    input PyTorch's self_attn got. PyTorch made a boolean key_padding_mask a 0/-inf float
    one: it becomes True = padding again, so a slip in the polarity shows in attn itself.
    The causal mask PyTorch got is left out: attn makes its own."""
    padding = kwargs.get("key_padding_mask")
    blocked = float("-inf")
    if padding is not None and padding.is_floating_point() and bool(((padding == 0) | (padding == blocked)).all()):
        padding = padding == blocked
    return attn(args[0], padding)


def call_mlp(mlp, args: list, kwargs: dict):
    """The learner's mlp on the input PyTorch's linear1 got (compared with linear2's output)."""
    return mlp(args[0])


BLOCK = Layer(
    ModuleKata(
        kata="causal_lm_block",
        cls="CausalLMBlock",
        asks=pick(
            "ln_1, attn (with q_proj, k_proj, v_proj, out_proj), ln_2, mlp (with up_proj, down_proj)",
            "ln_1、attn（含 q_proj、k_proj、v_proj、out_proj）、ln_2、mlp（含 up_proj、down_proj）",
        ),
        inputs=("x",),
        reference=pytorch_module,
        parameters=parameters,
        arguments=lambda case, options: ({"d_model": case["E"], "num_heads": case["H"]}, options),
        forward=reference_forward,
        probes=(
            Probe("attn", "self_attn", call_attention_as_the_block_does),
            Probe("mlp", "linear1", call_mlp, output_of="linear2"),
        ),
    ),
    tensors=lambda gen, case, dtype, device: {"x": tensor(gen, case, "L", dtype, device)},
    options=block_options,
    defaults_in_train=True,
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
    modules.load_state(module, parameters(reference))
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(T, device=torch.device(device))
    return (lambda: module(x)), (lambda: reference(x, src_mask=mask, is_causal=True))


SPEC = KataSpec(
    kata="causal_lm_block",
    symbol="CausalLMBlock",
    reference="nn.TransformerEncoderLayer(norm_first=True, activation='gelu') with a causal mask, in float64",
    forbidden=ATTENTION,
    tolerances=BLOCK.mk.tolerances,
    tolerance_note="GELU and LayerNorms over a few values compound: solutions and variants measured at most 0.15 of these in float32",
    cases=CASES,
    benchmark=benchmark,
)


@scenario
def before_and_after(kata, recipe: dict, x, changed) -> dict:
    """One block called on x, then on x changed from some position on: both outputs."""
    module, problem = modules.made(kata, recipe)
    if problem:
        return problem
    return {"before": module(x), "after": module(changed)}


def padded(gen, case, dtype, device) -> list[dict]:
    """A key_padding_mask [B, T], right-padded, a different length per batch row."""
    return [{"key_padding_mask": padding_mask(gen, case["B"], case["L"], right_only=True).to(device)}]


@core(zh="与带因果掩码的前置归一化（pre-norm）TransformerEncoderLayer 一致")
@dtypes(*FULL)
def test_matches_pre_norm_transformer_encoder_layer_with_a_causal_mask(kata, rng, gen, dtype, device):
    BLOCK.judge(kata, rng, gen, dtype, device)


@core(zh="key_padding_mask 为 True 的键被忽略")
@dtypes(*FULL)
def test_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
    """[B, T], right-padded, a different length per batch row."""
    BLOCK.judge(kata, rng, gen, dtype, device, masks=padded)


@core(zh="浮点 key_padding_mask 加到注意力分数上")
@dtypes(*FULL)
def test_float_key_padding_mask_is_added_to_the_scores(kata, rng, gen, dtype):
    def masks(gen, case, dtype, device):
        return [floats(gen, padded(gen, case, dtype, device)[0], dtype)]

    BLOCK.judge(kata, rng, gen, dtype, masks=masks, draws=2)


@core(zh="靠后的位置不改变靠前位置的输出")
def test_later_positions_do_not_change_earlier_outputs(kata, rng, gen):
    """Causality on its own: change x from position t on; outputs before t must not move."""
    case = CASES.random(rng)[1]
    built = BLOCK.build(gen, rng, case)
    x = BLOCK.inputs(gen, case)["x"]
    T = case["L"]
    t = rng.randrange(1, T)
    changed = x.clone()
    changed[:, t:] = randn(gen, case["B"], T - t, case["E"])
    call = call_repr(built.name, x)

    def earlier_outputs_stay(implementation) -> dict:
        got = modules.built_module(BLOCK.mk, built, before_and_after(implementation, built.recipe, x, changed))
        before, after = got["before"], got["after"]
        for output in (before, after):
            check_tensor_kind(output, x, call=call, what="output")
        moved = (before[:, :t] - after[:, :t]).abs().amax(dim=(0, 2)) > MODULE_TOLERANCES[torch.float32]["atol"]
        if moved.any():
            p = int(moved.nonzero()[0])
            raise AssertionError(
                pick(
                    f"{call}: changing x at positions {t}..{T - 1} only changed the output at position {p} < {t}; "
                    "position p may attend to positions 0..p only (block key j > query i)",
                    f"{call}：只改动了 x 在位置 {t}..{T - 1} 上的值，位置 {p} < {t} 的输出却变了；"
                    "位置 p 只能关注位置 0..p（屏蔽键 j > 查询 i 的配对）",
                )
            )
        return {}

    with case.judged(), diagnosing(BLOCK.mk.kata, earlier_outputs_stay, case):
        earlier_outputs_stay(kata)


@core(zh="具有 GPT-2 块的各个子模块")
def test_has_the_submodules_of_a_gpt2_block(kata, rng, gen):
    """ln_1, attn.{q,k,v,out}_proj, ln_2, mlp.{up,down}_proj, with biases exactly when bias=True."""
    BLOCK.has_its_submodules(kata, rng, gen)


@core(zh="自己实现注意力")
def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; every path
    of forward runs here, in eval() and train() mode."""
    BLOCK.writes_its_own_attention(kata, rng, gen, padded)


@convention(
    "the defaults: d_ff=4 * d_model, dropout=0.0, layer_norm_eps=1e-5.",
    zh="默认值为 d_ff=4 * d_model、无 dropout、eps=1e-5",
)
def test_defaults_are_d_ff_4_d_model_no_dropout_and_eps_1e_5(kata, rng, gen):
    """CausalLMBlock(d_model, num_heads) in train() mode: the defaults must hold."""
    BLOCK.keeps_its_defaults(kata, rng, gen, draws=2)


@convention(HALF_PRECISION, zh="在半精度下也能工作")
@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    BLOCK.works_in_half_precision(kata, rng, gen, dtype, padded)


@convention(FLOAT64_RULE, zh="float64 输入全程用 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    BLOCK.computes_float64_in_float64(kata, rng, gen, padded)


@convention(DROPOUT, zh="eval() 模式下关闭 dropout")
def test_eval_mode_disables_dropout(kata, rng, gen):
    BLOCK.eval_disables_dropout(kata, rng, gen)


@convention("dropout: ... in train() mode only", zh="train() 模式下启用 dropout")
def test_train_mode_applies_dropout(kata, rng, gen):
    BLOCK.train_applies_dropout(kata, rng, gen)


@convention(
    "raise ValueError when d_model is not divisible by num_heads.", zh="d_model 不能被 num_heads 整除时抛出 ValueError"
)
def test_d_model_not_divisible_by_num_heads_raises_value_error(kata, rng):
    modules.check_heads_must_divide(BLOCK.mk, kata, rng, "d_model", "num_heads")


@convention(
    "results follow the input's device (the causal mask made inside forward too).", zh="结果位于输入所在的设备上"
)
def test_results_follow_the_device_of_the_inputs(kata, other_device):
    """The causal mask made inside forward must be made on the input's device."""
    BLOCK.follows_the_device(kata, other_device, padded, {"d_ff": "F"})


@convention("the input and the mask are never changed in place.", zh="不修改输入")
def test_does_not_modify_its_inputs(kata, rng, gen):
    """A boolean and a float key_padding_mask."""
    BLOCK.leaves_its_inputs_alone(kata, rng, gen, lambda gen, case: padded(gen, case, None, "cpu")[0], {})

"""seq2seq_translation: the forward's properties, each judged on the learner's own model (see
common.py): its logits' form, the embeddings' initialisation, the sqrt(d_model) scale and the
sinusoidal table, causality, padding; the conventions of forward (inputs left alone, devices).

Each check plays one story where the kata lives (the `forwards` scenario: one model built
from a seed, called a few times, with its embeddings hooked inside when the check needs it)
and compares the calls of the trace here; its diagnosis replays the same story on each slip."""

import math

import torch
from torch import Tensor

from judge.language import pick
from judge.testing.checks import Mismatch, check_tensor_kind, judge_on_device
from judge.testing.functions import assert_inputs_unchanged
from judge.testing.inputs import randn
from judge.testing.spec import edge
from judge.testing.tiers import convention, core

from .common import (
    CASES,
    INIT_RTOL,
    MAX_LEN,
    SPEC,  # noqa: F401 - the kata fixture loads the kata named by the test module's SPEC
    assert_hooks_ran,
    call_text,
    check_property,
    d_model,
    embedding_weights,
    forwards,
    kata_diagnosing,
    logits_and_loss,
    model_repr,
    recipe,
    right_padded,
    same_or_blank,
    sinusoids,
    tokens,
    trace_of,
)


def pad_id_for(rng, case) -> int:
    return rng.randrange(min(case["Vs"], case["Vt"]))


def calls_of(implementation, made: dict, calls: list) -> list:
    """The trace of `forwards`: one entry per call."""
    return trace_of(forwards(implementation, made, calls))["calls"]


@core(zh="forward 返回形状为 [B, T, tgt_vocab_size] 的 float32 logits")
def test_forward_returns_float32_logits_of_shape_B_T_tgt_vocab_size(kata, rng, gen, seed):
    """Shape, dtype and device before anything else; finite values."""
    for case in CASES.cases(rng):
        with case.judged():
            pad_id = pad_id_for(rng, case)
            src = right_padded(gen, case["B"], case["S"], case["Vs"], pad_id)
            tgt_in = right_padded(gen, case["B"], case["T"], case["Vt"], pad_id)
            made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src, tgt_in)

            def replay(implementation, made=made, src=src, tgt_in=tgt_in) -> dict:
                return {"logits": calls_of(implementation, made, [(src, tgt_in, None)])[0]["logits"]}

            with kata_diagnosing(replay, case):
                logits = replay(kata)["logits"]
                want = torch.empty(case["B"], case["T"], case["Vt"])
                check_tensor_kind(logits, want, call=call, what="logits")
                if not torch.isfinite(logits).all():
                    raise Mismatch(
                        pick(
                            f"{call} returned logits with NaN or Inf (a padding mask of the wrong polarity "
                            "blocks every key of some row?)",
                            f"{call} 返回的 logits 含 NaN 或 Inf（填充掩码的极性反了，把某一行的所有键都屏蔽了？）",
                        ),
                        what="logits",
                        actual=logits,
                        expected=want,
                        kind_only=True,
                    )


@core(zh="token 嵌入的初始 RMS 为 d_model ** -0.5")
def test_token_embeddings_start_with_rms_d_model_to_the_minus_half(kata, rng, seed):
    """N(0, d_model ** -0.5), so that after the sqrt(d_model) scale a token's embedding is of
    unit size, like the positional encodings. Judged on the RMS of each weight (19,200 values:
    its relative spread is 0.5%, the band is 10%); once at the defaults, once at d_model 16."""
    for case in (
        edge("the defaults: d_model 64", "默认值：d_model 为 64", Vs=300, Vt=301, E=64, defaults=True),
        edge("d_model 16", "d_model 为 16", Vs=1200, Vt=1201, E=16, H=2, F=24, Le=1, Ld=1),
    ):
        with case.judged():
            pad_id = rng.randrange(case["Vs"])
            expected = torch.tensor(d_model(case) ** -0.5, dtype=torch.float64)
            name, made = model_repr(case, pad_id), recipe(case, pad_id, seed)

            def replay(implementation, made=made) -> dict:
                weights = trace_of(embedding_weights(implementation, made))
                return {
                    f"the RMS of {part}.weight": weight.double().square().mean().sqrt()
                    for part, weight in weights.items()
                }

            with kata_diagnosing(replay, case):
                for what, rms in replay(kata).items():
                    check_property(
                        rms,
                        expected,
                        call=name,
                        what=what,
                        tolerance={"rtol": INIT_RTOL, "atol": 0.0},
                        text=pick(
                            f"{name}: {what} is {float(rms):.4g}, expected about d_model ** -0.5 = "
                            f"{float(expected):.4g}: initialise both embeddings with nn.init.normal_(weight, "
                            "std=d_model ** -0.5) (nn.Embedding's default is N(0, 1); times sqrt(d_model) it drowns "
                            "the positional encodings)",
                            f"{name}：{what.removeprefix('the RMS of ')} 的 RMS 是 {float(rms):.4g}，应约为 "
                            f"d_model ** -0.5 = {float(expected):.4g}：两个嵌入都要用 "
                            "nn.init.normal_(weight, std=d_model ** -0.5) 初始化（nn.Embedding 的默认初始化是 "
                            "N(0, 1)；乘以 sqrt(d_model) 之后会淹没位置编码）",
                        ),
                    )


@core(zh="嵌入先乘以 sqrt(d_model)，再加上正弦位置编码表")
def test_embeddings_are_scaled_by_sqrt_d_model_then_the_sinusoidal_table_is_added(kata, rng, gen, seed):
    """With both embeddings hooked to return (c - PE[:length]) / sqrt(d_model), a correct model
    feeds the same vector c at every position into both stacks: the same logits at every target
    position, for any source length."""
    for case in CASES.cases(rng):
        with case.judged():
            B, S, T, D = case["B"], case["S"], case["T"], d_model(case)
            pad_id = pad_id_for(rng, case)
            longer = S + rng.randint(1, 3)
            src_short, src_long = tokens(gen, B, S, case["Vs"], pad_id), tokens(gen, B, longer, case["Vs"], pad_id)
            tgt_in = tokens(gen, B, T, case["Vt"], pad_id)
            # (c - PE[:length]) / sqrt(D): every position then enters the stacks as the same
            # vector c, of unit size (zeros would leave the layers' LayerNorms amplifying rounding)
            c = randn(gen, D, dtype=torch.float64)
            hooks = {"replace": (c - sinusoids(MAX_LEN, D)) / math.sqrt(D)}
            made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src_short, tgt_in)
            calls = [(src_short, tgt_in, hooks), (src_long, tgt_in, hooks)]

            def replay(implementation, made=made, calls=calls) -> dict:
                short, long = calls_of(implementation, made, calls)
                return {
                    "logits": short["logits"],
                    "logits for a longer source": long["logits"],
                    "hooked": short["hooked"],
                }

            with kata_diagnosing(replay, case):
                result = replay(kata)
                assert_hooks_ran(result["hooked"], call)
                short, long = result["logits"], result["logits for a longer source"]
                check_tensor_kind(short, torch.empty(B, T, case["Vt"]), call=call, what="logits")
                setup = pick(
                    f"{call} with src_embedding and tgt_embedding hooked to return (c - PE[:length]) / "
                    "sqrt(d_model), c one random vector (PE the paper's sinusoidal table, sines in the even "
                    "columns, cosines in the odd ones): then embedding * sqrt(d_model) + PE is c at every "
                    "position, every position enters the encoder and the decoder with the same vector, ",
                    f"{call}，其中 src_embedding 和 tgt_embedding 被钩子改为返回 (c - PE[:length]) / sqrt(d_model)，"
                    "c 是一个随机向量（PE 是论文中的正弦表，偶数列为 sin，奇数列为 cos）：于是 "
                    "embedding * sqrt(d_model) + PE 在每个位置上都等于 c，每个位置都以同一个向量进入编码器和解码器，",
                )
                advice = pick(
                    "Scale the embeddings by sqrt(d_model) FIRST, then add PE[:length] (not (embedding + PE) * "
                    "sqrt(d_model)), on both sides, with the paper's table.",
                    "【先】把嵌入乘以 sqrt(d_model)，再加上 PE[:length]（而不是 (embedding + PE) * sqrt(d_model)），"
                    "两侧都要这样做，并使用论文中的表。",
                )
                check_property(
                    short,
                    short[:, :1].expand_as(short),
                    call=call,
                    what="logits",
                    text=setup
                    + pick(
                        "and every target position should get the same logits as position 0. ",
                        "因此每个目标位置都应得到与位置 0 相同的 logits。",
                    )
                    + advice,
                )
                check_property(
                    long,
                    short,
                    call=call,
                    what="logits for a longer source",
                    text=setup
                    + pick(
                        f"and a source of {longer} positions instead of {S} should change no logit. ",
                        f"因此把源从 {S} 个位置换成 {longer} 个位置不应改变任何 logit。",
                    )
                    + advice,
                )


def first_positions(logits, t: int):
    return logits[:, : t + 1] if isinstance(logits, Tensor) and logits.dim() == 3 else logits


@core(zh="目标位置 t 的 logits 不依赖后面的目标 token")
def test_logits_at_target_position_t_do_not_depend_on_later_target_tokens(kata, rng, gen, seed):
    """Causality: the decoder's self-attention masks every target key j > query i, in training
    (teacher forcing feeds the whole target at once) as in decoding."""
    for case in CASES.cases(rng):
        if case["T"] < 2:
            continue
        with case.judged():
            B, S, T = case["B"], case["S"], case["T"]
            pad_id = pad_id_for(rng, case)
            src = right_padded(gen, B, S, case["Vs"], pad_id)
            tgt_in = tokens(gen, B, T, case["Vt"], pad_id)
            t = rng.randrange(T - 1)
            changed = tgt_in.clone()
            changed[:, t + 1 :] = tokens(gen, B, T - t - 1, case["Vt"], pad_id)
            if torch.equal(changed, tgt_in):
                other = (int(tgt_in[0, -1]) + 1) % case["Vt"]
                changed[0, -1] = (other + 1) % case["Vt"] if other == pad_id else other
            made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src, tgt_in)
            calls = [(src, tgt_in, None), (src, changed, None)]

            def replay(implementation, made=made, calls=calls, t=t) -> dict:
                before, after = calls_of(implementation, made, calls)
                return {
                    "logits": first_positions(before["logits"], t),
                    "logits at positions 0..t": first_positions(after["logits"], t),
                }

            with kata_diagnosing(replay, case):
                result = replay(kata)
                check_property(
                    result["logits at positions 0..t"],
                    result["logits"],
                    call=call,
                    what="logits at positions 0..t",
                    text=pick(
                        f"{call}: changing the target tokens after position t = {t} changed the logits at "
                        f"positions 0..{t}: position i must not see target tokens j > i. Give the decoder's "
                        "self-attention a causal mask (True above the diagonal, nn.* polarity: True = blocked), "
                        "in every call, training included.",
                        f"{call}：改动位置 t = {t} 之后的目标 token，改变了位置 0..{t} 的 logits：位置 i 不能看到"
                        "位置 j > i 的目标 token。给解码器的自注意力加上因果掩码（对角线以上为 True，nn.* 的极性："
                        "True = 屏蔽），每次调用都要加，训练时也一样。",
                    ),
                )


@core(zh="源端填充不改变任何 logit")
def test_source_padding_changes_no_logit(kata, rng, gen, seed):
    """More padding after each source row, and noise in place of what src_embedding returns at
    padding positions: the logits stay the same. Padding is masked in the encoder's
    self-attention and in the decoder's cross-attention."""
    for case in CASES.cases(rng):
        with case.judged():
            B, S, T = case["B"], case["S"], case["T"]
            pad_id = pad_id_for(rng, case)
            src = right_padded(gen, B, S, case["Vs"], pad_id)
            extra = rng.randint(1, 3)
            padded = torch.cat([src, torch.full((B, extra), pad_id)], dim=1)
            tgt_in = tokens(gen, B, T, case["Vt"], pad_id)
            hooks = {"noise_seed": rng.randrange(2**31), "pad_id": pad_id}
            made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src, tgt_in)
            calls = [(src, tgt_in, None), (padded, tgt_in, hooks)]

            def replay(implementation, made=made, calls=calls) -> dict:
                plain, more = calls_of(implementation, made, calls)
                return {"logits": plain["logits"], "logits with more source padding": more["logits"]}

            with kata_diagnosing(replay, case):
                result = replay(kata)
                check_property(
                    result["logits with more source padding"],
                    result["logits"],
                    call=call,
                    what="logits with more source padding",
                    text=pick(
                        f"{call}: {extra} more padding column(s) after each source row, and random vectors "
                        "in place of the padding tokens' embeddings, changed the logits: a real token must never "
                        "attend to source padding. Mask src == pad_id (True = blocked) in the encoder "
                        "(src_key_padding_mask) AND in the decoder's cross-attention (memory_key_padding_mask).",
                        f"{call}：在每个源行之后多加 {extra} 列填充，并用随机向量替换填充 token 的嵌入，结果 logits "
                        "变了：真实 token 绝不能关注源端填充。在编码器中（src_key_padding_mask）【以及】解码器的"
                        "交叉注意力中（memory_key_padding_mask）都要屏蔽 src == pad_id（True = 屏蔽）。",
                    ),
                )


@core(zh="目标端填充不改变真实位置上的 logit")
def test_target_padding_changes_no_logit_at_real_positions(kata, rng, gen, seed):
    """More padding after each target row, and noise in place of what tgt_embedding returns at
    padding positions: the logits at real (non-padding) target positions stay the same."""
    for case in CASES.cases(rng):
        with case.judged():
            B, S, T = case["B"], case["S"], case["T"]
            pad_id = pad_id_for(rng, case)
            src = right_padded(gen, B, S, case["Vs"], pad_id)
            tgt_in = right_padded(gen, B, T, case["Vt"], pad_id)
            extra = rng.randint(1, 3)
            padded = torch.cat([tgt_in, torch.full((B, extra), pad_id)], dim=1)
            real = (tgt_in != pad_id).unsqueeze(-1)
            hooks = {"noise_seed": rng.randrange(2**31), "pad_id": pad_id}
            made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src, tgt_in)
            calls = [(src, tgt_in, None), (src, padded, hooks)]

            def replay(implementation, made=made, calls=calls, real=real, T=T) -> dict:
                plain, more = (entry["logits"] for entry in calls_of(implementation, made, calls))
                kept = more[:, :T] if isinstance(more, Tensor) and more.dim() == 3 else more
                return {
                    "logits": same_or_blank(plain, plain, real),
                    "logits at real target positions": same_or_blank(plain, kept, real),
                }

            with kata_diagnosing(replay, case):
                result = replay(kata)
                check_property(
                    result["logits at real target positions"],
                    result["logits"],
                    call=call,
                    what="logits at real target positions",
                    text=pick(
                        f"{call}: {extra} more padding column(s) after each target row, and random vectors "
                        "in place of the padding tokens' embeddings, changed the logits at real target positions "
                        "(padding positions are not judged): mask tgt_in == pad_id (tgt_key_padding_mask) and "
                        "causally.",
                        f"{call}：在每个目标行之后多加 {extra} 列填充，并用随机向量替换填充 token 的嵌入，结果真实"
                        "目标位置上的 logits 变了（填充位置不参与评判）：要屏蔽 tgt_in == pad_id"
                        "（tgt_key_padding_mask），并加上因果掩码。",
                    ),
                )


# --------------------------------------------------------------------------- conventions


@convention("src and tgt_in are never changed in place.", zh="forward 不修改输入")
def test_forward_does_not_modify_its_inputs(kata, rng, gen, seed):
    """Padded source and target, the embeddings hooked with noise at the padding (as the padding
    tests call it) and not."""
    case = CASES.random(rng)[0]
    pad_id = pad_id_for(rng, case)
    src = right_padded(gen, case["B"], case["S"], case["Vs"], pad_id)
    tgt_in = right_padded(gen, case["B"], case["T"], case["Vt"], pad_id)
    hooks = {"noise_seed": rng.randrange(2**31), "pad_id": pad_id}
    made, call = recipe(case, pad_id, seed), call_text(model_repr(case, pad_id), src, tgt_in)
    calls = [(src, tgt_in, None), (src, tgt_in, hooks)]

    def check(implementation) -> dict:
        for entry in calls_of(implementation, made, calls):
            assert_inputs_unchanged(
                call, {"src": src, "tgt_in": tgt_in}, {"src": entry["src"], "tgt_in": entry["tgt_in"]}
            )
        return {}

    with case.judged(), kata_diagnosing(check, case):  # an in-place slip is named: its replay fails the same way
        check(kata)


@convention(
    "results follow the inputs' device: the model moved with .to(device) returns its logits there",
    zh="logits 和 loss 跟随输入所在的设备",
)
def test_logits_and_loss_follow_the_device_of_the_inputs(kata, other_device):
    """The model moved with .to(device): its positional table must be a buffer, masks made on
    the inputs' device; loss_fn's result follows the logits. On a machine without CUDA, "meta"
    stands in (shapes and devices only). Fixed sizes, ids and draws: a verdict on the stand-in
    must not depend on the seed."""
    case, pad_id = CASES.edges[0], 1
    B, S, T = case["B"], case["S"], case["T"]

    def run(device: str, check) -> None:
        gen = torch.Generator().manual_seed(0)
        src = right_padded(gen, B, S, case["Vs"], pad_id).to(device)
        tgt = right_padded(gen, B, T + 1, case["Vt"], pad_id).to(device)
        made = recipe(case, pad_id, 0, device)
        call = pick(
            f"{model_repr(case, pad_id)}.to({device!r})(src, tgt_in) and loss_fn(logits, tgt_out, {pad_id}) "
            f"on {device}",
            f"{model_repr(case, pad_id)}.to({device!r})(src, tgt_in) 以及 loss_fn(logits, tgt_out, {pad_id})，"
            f"在 {device} 上",
        )

        def replay(implementation) -> dict:
            return logits_and_loss(implementation, made, src, tgt)

        with kata_diagnosing(replay, case):
            check(call, replay(kata))

    def expected(device: str) -> dict:
        return {"logits": torch.empty(B, T, case["Vt"], device=device), "loss": torch.empty((), device=device)}

    def compare(got, want, *, call: str, what: str) -> None:  # no reference values: their kind only
        check_tensor_kind(got, want, call=call, what=what)

    judge_on_device(run, other_device, expected=expected, compare=compare)

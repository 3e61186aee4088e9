"""seq2seq_translation: loss_fn against F.cross_entropy(ignore_index=pad_id) in float64, and
greedy_decode on a scripted stand-in model (ScriptedModel) whose logits force each row's
tokens, so the expected ys follows from the script alone.

A decoding is a story: ONE scenario (`decoding`) builds the scripted model where the kata
lives, lets the learner's greedy_decode run it, and returns the trace: the tokens, the grad
mode of every call of the model, and src as the call left them. The tests compare it here;
each diagnosis replays the same decoding on the known slips."""

import math
import random

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from judge.language import pick, tr
from judge.testing.checks import Mismatch, check_tensor_kind, describe, judge_on_device
from judge.testing.functions import assert_inputs_unchanged
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import Case, edge
from judge.testing.tiers import convention, core

from .common import CASES, GRADIENT_TOLERANCE, LOSS_ROUNDING, SPEC, detached, kata_diagnosing, right_padded

# --------------------------------------------------------------------------- loss_fn


@scenario
def loss_called(kata, logits: Tensor, tgt_out: Tensor, pad_id: int, upstream: float) -> dict:
    """loss_fn(logits, tgt_out, pad_id), logits a leaf that requires grad; then (loss *
    upstream).backward() when the loss is a 0-d tensor that requires grad. The loss, the
    gradient of logits (when there is one), and the arguments as the call left them."""
    leaf = logits.requires_grad_()
    loss = kata.loss_fn(leaf, tgt_out, pad_id)
    result = {"loss": detached(loss), "logits": leaf.detach(), "tgt_out": tgt_out}
    if isinstance(loss, Tensor) and loss.requires_grad and loss.dim() == 0:
        (loss * upstream).backward()
        result["the gradient of `logits`"] = leaf.grad
    return result


def loss_inputs(rng, gen, case) -> tuple:
    """(logits [B, T, V] float32, tgt_out [B, T] padded on the right and once inside a row, pad_id,
    upstream): pad_id 0, V - 1 or between."""
    B, T, V = case["B"], case["T"], case["Vt"]
    pad_id = rng.choice((0, V - 1, rng.randrange(V)))
    logits = randn(gen, B, T, V, std=3.0)
    tgt_out = right_padded(gen, B, T, V, pad_id)
    if B * T > 1:  # padding inside a row too: the loss never looks at where a row ends
        tgt_out.view(-1)[int(torch.randint(B * T, (1,), generator=gen))] = pad_id
        if bool((tgt_out == pad_id).all()):
            tgt_out[0, 0] = (pad_id + 1) % V
    upstream = float(randn(gen, 1, std=1.0).abs() + 0.5)
    return logits, tgt_out, pad_id, upstream


@core(zh="loss_fn 是非填充目标上的交叉熵")
def test_loss_fn_is_cross_entropy_over_the_non_padding_targets(kata, rng, gen):
    """F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id) in float64,
    and its gradient with respect to the logits; pad_id 0, V - 1 or between."""
    for case in CASES.cases(rng):
        with case.judged():
            logits, tgt_out, pad_id, upstream = loss_inputs(rng, gen, case)
            V = logits.size(-1)
            twin = logits.double().requires_grad_()
            want = F.cross_entropy(twin.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id)
            (want * upstream).backward()
            call = f"loss_fn({describe(logits)}, {describe(tgt_out)}, pad_id={pad_id})"

            def replay(implementation, logits=logits, tgt_out=tgt_out, pad_id=pad_id, upstream=upstream) -> dict:
                got = loss_called(implementation, logits, tgt_out, pad_id, upstream)
                return {k: got[k] for k in ("loss", "the gradient of `logits`") if k in got}

            with kata_diagnosing(replay, case):
                result = replay(kata)
                expected = want.detach().float()
                tolerance = {
                    "rtol": 0.0,
                    "atol": LOSS_ROUNDING * torch.finfo(torch.float32).eps * (float(logits.abs().max()) + math.log(V)),
                }
                SPEC.assert_close(result["loss"], expected, call=call, what="loss", tolerance=tolerance)
                if result.get("the gradient of `logits`") is None:
                    raise AssertionError(
                        pick(
                            f"{call}: the loss carries no gradient back to `logits` (keep it a tensor op)",
                            f"{call}：loss 没有把梯度传回 `logits`（请保持为张量运算）",
                        )
                    )
                SPEC.assert_close(
                    result["the gradient of `logits`"],
                    twin.grad.float(),
                    call=call + ".backward()",
                    what="the gradient of `logits`",
                    tolerance=GRADIENT_TOLERANCE,
                )


@convention("logits and tgt_out are never changed in place.", zh="loss_fn 不修改输入")
def test_loss_fn_does_not_modify_its_inputs(kata, rng, gen):
    for case in CASES.random(rng):
        logits, tgt_out, pad_id, upstream = loss_inputs(rng, gen, case)
        call = f"loss_fn({describe(logits)}, {describe(tgt_out)}, pad_id={pad_id})"

        def check(implementation, logits=logits, tgt_out=tgt_out, pad_id=pad_id, upstream=upstream, call=call) -> dict:
            got = loss_called(implementation, logits, tgt_out, pad_id, upstream)
            sent = {"logits": logits, "tgt_out": tgt_out}
            assert_inputs_unchanged(call, sent, {"logits": got["logits"], "tgt_out": got["tgt_out"]})
            return {}

        with case.judged(), kata_diagnosing(check, case):
            check(kata)


# --------------------------------------------------------------------------- greedy_decode


class ScriptedModel(nn.Module):
    """A stand-in translator whose predictions are scripted: `table` [R, steps, V] holds the
    logits of row r at target position t (after t + 1 tokens); row r of a batch is the one
    whose src[:, 0] is r (so a decoder that drops finished rows still gets the right script).
    Records the grad mode of every call."""

    def __init__(self, table: Tensor, pad_id: int, device="cpu"):
        super().__init__()
        self.pad_id = pad_id
        # unused: a decoder that asks next(model.parameters()).device for the device gets src's
        self.anchor = nn.Parameter(torch.zeros((), device=device))
        self.table = table  # on the CPU
        self.grad_modes = []

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        self.grad_modes.append(torch.is_grad_enabled())
        rows = src[:, 0].cpu()
        return self.table[rows, : tgt_in.size(1)].to(src.device)


@scenario
def decoding(kata, table: Tensor, pad_id: int, src: Tensor, ids: tuple, max_len: int) -> dict:
    """greedy_decode(ScriptedModel(table, pad_id) on src's device, src, bos_id, eos_id, max_len):
    its tokens, the grad mode of each call of the model, and src as the call left it."""
    bos_id, eos_id = ids
    model = ScriptedModel(table, pad_id, src.device)
    ys = kata.greedy_decode(model, src, bos_id, eos_id, max_len)
    return {"tokens": ys, "grad modes": torch.tensor(model.grad_modes, dtype=torch.bool), "src": src}


def scripted_case(rng, gen, case, *, device="cpu") -> dict:
    """The script of a case: row b predicts eos at step eos_at[b] (None: never) and content
    tokens (neither pad nor eos, nor bos) everywhere else, before and after its EOS, each the
    argmax by a margin of about 10 over noise. {table, pad_id, src, ids (bos, eos), max_len,
    expected ys}."""
    B, V, eos_at, max_len = case["B"], case["V"], case["eos_at"], case["max_len"]
    pad_id, bos_id, eos_id = rng.sample(range(V), 3)
    content = [v for v in range(V) if v not in (pad_id, bos_id, eos_id)]
    steps = max(max_len, 1)
    script = torch.tensor([[rng.choice(content) for _ in range(steps)] for _ in range(B)], dtype=torch.long)
    for b, step in enumerate(eos_at):
        if step is not None and step < steps:
            script[b, step] = eos_id
    table = randn(gen, *script.shape, V).scatter_add(-1, script[..., None], torch.full((*script.shape, 1), 10.0))
    order = list(range(B))
    rng.shuffle(order)  # row ids in src[:, 0], not in order
    src = torch.cat([torch.tensor(order)[:, None], torch.randint(V, (B, 3), generator=gen)], dim=1)
    rows = []
    for b in range(B):
        row, step = [bos_id], 0
        while len(row) < max_len:
            token = int(script[order[b], step])
            row.append(token)
            step += 1
            if token == eos_id:
                break
        rows.append(row)
    length = max(len(row) for row in rows)
    expected = torch.tensor([row + [pad_id] * (length - len(row)) for row in rows], dtype=torch.long)
    return {
        "table": table,
        "pad_id": pad_id,
        "src": src.to(device),
        "ids": (bos_id, eos_id),
        "max_len": max_len,
        "expected": expected.to(device),
    }


def decode_text(script: dict) -> str:
    bos_id, eos_id = script["ids"]
    src, max_len = script["src"], script["max_len"]
    return f"greedy_decode(model, {describe(src)}, bos_id={bos_id}, eos_id={eos_id}, max_len={max_len})"


def decoded(implementation, script: dict) -> dict:
    """The trace of the decoding of `script` where `implementation` lives."""
    return decoding(implementation, script["table"], script["pad_id"], script["src"], script["ids"], script["max_len"])


# fmt: off
GREEDY_CASES = (  # the most telling first: rows finishing at different steps, content after EOS
    edge("rows finishing at steps 1, 4, 2 and 3", "各行分别在第 1、4、2、3 步结束",
         B=4, V=12, eos_at=[1, 4, 2, 3], max_len=9),
    edge("one row never produces EOS: max_len columns", "有一行始终不产生 EOS：共 max_len 列",
         B=3, V=9, eos_at=[2, None, 0], max_len=6),
    edge("every row produces EOS at once", "每一行都立刻产生 EOS",
         B=3, V=7, eos_at=[0, 0, 0], max_len=5),
    edge("one row, EOS on the last allowed step", "只有一行，EOS 出现在允许的最后一步",
         B=1, V=6, eos_at=[3], max_len=5),
    edge("max_len 1: the BOS column alone", "max_len 为 1：只有 BOS 一列",
         B=2, V=8, eos_at=[0, 1], max_len=1),
)
# fmt: on


def greedy_cases(rng) -> list:
    """The named cases, then two random draws."""
    draws = []
    for n in range(2):
        B, max_len = rng.randint(2, 6), rng.randint(4, 10)
        eos_at = [rng.choice([None] + list(range(max_len + 2))) for _ in range(B)]
        sizes = {"B": B, "V": rng.randint(5, 20), "eos_at": eos_at, "max_len": max_len}
        draws.append(Case(tr("random draw {n}", n=n + 1), sizes, True))
    return [*GREEDY_CASES, *draws]


def check_tokens(ys, script: dict, call: str) -> None:
    expected = script["expected"]
    check_tensor_kind(ys, expected, call=call, what="tokens")
    if not torch.equal(ys.cpu(), expected.cpu()):
        raise Mismatch(
            pick(
                f"{call} (model.pad_id = {script['pad_id']}) returned wrong tokens:\n{ys.tolist()}\nexpected\n"
                f"{expected.tolist()}\n(column 0 is BOS; each step appends the argmax of "
                "model(src, ys)[:, -1]; after a row's EOS only pad_id; stop once every row has its EOS, "
                "or at max_len columns)",
                f"{call}（model.pad_id = {script['pad_id']}）返回的 token 不对：\n{ys.tolist()}\n期望\n"
                f"{expected.tolist()}\n（第 0 列是 BOS；每一步追加 model(src, ys)[:, -1] 的 argmax；"
                "一行出现 EOS 之后只填 pad_id；所有行都有了 EOS 就停止，最多 max_len 列）",
            ),
            what="tokens",
            actual=ys,
            expected=expected,
        )


@core(zh="greedy_decode 以 BOS 开头，在每行的 EOS 处停止，之后填充")
def test_greedy_decode_starts_with_bos_stops_at_each_rows_eos_and_pads_after_it(kata, rng, gen):
    """Scripted logits force each row's tokens; the expected ys follows from the script alone."""
    for case in greedy_cases(rng):
        with case.judged():
            script = scripted_case(rng, gen, case)

            def replay(implementation, script=script) -> dict:
                return {"tokens": decoded(implementation, script)["tokens"]}

            with SPEC.diagnosing(replay, {"B": case["B"]}):
                check_tokens(replay(kata)["tokens"], script, decode_text(script))


@convention(
    "the model runs without gradients (torch.no_grad() or torch.inference_mode())",
    zh="greedy_decode 在不计算梯度的情况下运行模型",
)
def test_greedy_decode_runs_the_model_without_gradients(kata, rng, gen):
    """Every call of the scripted model, in every case, is made with grad mode off."""
    for case in greedy_cases(rng):
        with case.judged():
            script = scripted_case(rng, gen, case)
            call = decode_text(script)

            def replay(implementation, script=script) -> dict:
                return {"grad modes": decoded(implementation, script)["grad modes"]}

            with SPEC.diagnosing(replay, {"B": case["B"]}):
                modes = replay(kata)["grad modes"]
                if bool(modes.any()):
                    raise Mismatch(
                        pick(
                            f"{call} called the model with gradients enabled ({int(modes.sum())} of {modes.numel()} "
                            "calls): decode under torch.no_grad() (a graph per step only costs memory)",
                            f"{call} 在启用梯度的情况下调用了模型（{modes.numel()} 次调用中有 {int(modes.sum())} 次）："
                            "请在 torch.no_grad() 下解码（每一步建一张计算图只会白白占用内存）",
                        ),
                        what="grad modes",
                        actual=modes,
                        expected=torch.zeros_like(modes),
                    )


@convention("src is never changed in place.", zh="greedy_decode 不修改 src")
def test_greedy_decode_does_not_modify_src(kata, rng, gen):
    for case in GREEDY_CASES[:2]:
        script = scripted_case(rng, gen, case)
        call = decode_text(script)

        def check(implementation, script=script, call=call) -> dict:
            assert_inputs_unchanged(call, {"src": script["src"]}, {"src": decoded(implementation, script)["src"]})
            return {}

        with case.judged(), SPEC.diagnosing(check, {"B": case["B"]}):
            check(kata)


@convention("ys follows src's device.", zh="greedy_decode 返回的 token 在 src 所在的设备上")
def test_greedy_decode_returns_its_tokens_on_the_device_of_src(kata, other_device):
    """Fixed script (the first named case, fixed draws). Reading a value (finished.all()) is fine:
    on "meta" this check is then inconclusive."""
    case = GREEDY_CASES[0]

    def script_on(device: str) -> dict:
        return scripted_case(random.Random(0), torch.Generator().manual_seed(0), case, device=device)

    def run(device: str, check) -> None:
        script = script_on(device)

        def replay(implementation) -> dict:
            return {"tokens": decoded(implementation, script)["tokens"]}

        with SPEC.diagnosing(replay, {"B": case["B"]}):
            on_device = pick(f"greedy_decode(model on {device}, ", f"greedy_decode({device} 上的 model, ")
            check(decode_text(script).replace("greedy_decode(model, ", on_device), replay(kata))

    def compare(got, want, *, call: str, what: str) -> None:
        check_tensor_kind(got, want, call=call, what=what)
        if not torch.equal(got.cpu(), want.cpu()):
            raise Mismatch(
                pick(
                    f"{call} returned wrong tokens: {got.tolist()}, expected {want.tolist()}",
                    f"{call} 返回的 token 不对：{got.tolist()}，期望 {want.tolist()}",
                ),
                what=what,
                actual=got,
                expected=want,
            )

    judge_on_device(
        run, other_device, expected=lambda device: {"tokens": script_on(device)["expected"]}, compare=compare
    )

"""seq2seq_translation: train(), judged twice. Each run is a story played whole where the kata
lives, ONE scenario returning its trace; expected values are computed here only.

- against a reference loop (`training`): train(model, batches, 7, lr) on a ReferenceSeq2Seq
  built from a seed where the kata lives, reference_train on the same model built here: the
  losses it returns (one per step) and the logits after training, within TRAIN_TOLERANCE;
  its conventions (Python floats; the batches left alone) from the same trace;
- training, last (the only slow test, `trained_translator`): the learner's Seq2SeqTransformer
  (d_model 32, 4 heads, 2 + 2 layers, feed-forward 64, from seed INIT_SEED) is trained by the
  learner's train() for TRAIN_STEPS steps of Adam(lr 1e-3) on batches of 32 fresh pairs of the
  toy task (digits and letters: letters upper-cased, each digit d -> 9 - d, the sequence
  reversed, its first token doubled; 1 to 6 source tokens; BOS/EOS and padding), then decoded
  greedily (by the test's own greedy decoder, reference_greedy, run in the same scenario, so
  this test judges the model and train() only) on 200 held-out pairs, whose sources alone are
  sent: at least 90% must come out exactly right, counted here.

  Calibration (2 cores, torch 2.13 CPU, one thread, train_and_score(implementation, seed,
  1000 + seed) for seeds 0-19, initialisation and data both varied): accuracy on the held-out
  pairs, the mean loss of the last 10 steps, CPU time of one run (build, train, decode):
    the solution (post-norm nn.TransformerEncoder/Decoder, no final norms):
      min 99.0%, median 100%; loss 0.008-0.047; 4.6-5.7 s;
    the variant (one nn.Transformer, pre-norm, final norms, float masks, hand-written loss
      and clipping): min 98.5%, median 100%; loss 0.010-0.035; 4.7-5.9 s;
    ReferenceSeq2Seq (one nn.Transformer, post-norm, final norms) with the solution's
      functions: min 99.0%, median 100%; loss 0.009-0.019; 4.8-5.8 s.
  The test itself costs one such run of CPU in the kata process (one thread; the held-out
  decoding, 0.07 s, and the data, 0.13 s, included), whatever the seed: the steps, the data
  and the model are fixed. On an idle machine that is its wall time too; its wall time grows
  with the load: 28-32 s on 2 cores at load 12-13 (7-9 s of CPU then), past the grader's
  default 20 s per test, as before the move to scenarios (info.toml's `test_timeout` is
  where a training kata declares more). Fewer steps would cut it, at a cost in margin: the
  held-out accuracy after 300 / 400 / 500 steps (the reference loop on the learner's model,
  seeds 0-9): the solution min 93.0% / 98.0% / 99.5%, the pre-norm variant min 87.5% /
  95.0% / 97.0%.
  What the slips reach in this same run (seeds 0-4; each is caught earlier by a property test,
  so this test is never what rejects them): embeddings left at N(0, 1) 6-16% (the reason for
  fairseq's init: the kata text measured about 1,800 steps instead of 400 to learn the
  reversal), no causal mask 0-36% (it learns to copy the next input), the padding mask
  inverted 0%, the targets not shifted 0%, the gradients never zeroed 72-95%; the slips that
  training forgives, which only the properties catch: the memory padding or the encoder
  padding not masked (99.5-100%: training and decoding pad alike), PE added before the scale or
  no scale at all (100%), padding counted in the loss (98-100%), no clipping (100%).

The slips are caught by the fast tests, which run first (each tier cheapest first: the training
test, the costliest, last); the training test is not diagnosed (replaying a slip would mean training it).
"""

import random

import torch
from torch import Tensor, nn

from judge.language import pick
from judge.testing.checks import Mismatch, describe
from judge.testing.functions import assert_inputs_unchanged
from judge.testing.scenarios import scenario
from judge.testing.spec import edge
from judge.testing.tiers import convention, core

from .common import (
    SPEC,
    TRAIN_TOLERANCE,
    check_property,
    detached,
    reference_model,
    reference_train,
    right_padded,
)

# --------------------------------------------------------------------------- train() against a reference loop

TRAIN_CASE = edge(
    "3 batches cycled over 7 steps", "3 个批次在 7 步中循环使用", B=4, Vs=11, Vt=9, E=16, H=2, F=24, Le=1, Ld=2
)
STEPS, TRAIN_LR = 7, 0.01


@scenario
def training(kata, sizes: dict, seed: int, batches: list, steps: int, lr: float, probe: tuple) -> dict:
    """train(model, batches, steps, lr) on ReferenceSeq2Seq(sizes) built from `seed`: what it
    returned (tensors detached) and the type of each element, the model's logits on `probe`
    after training, and the batches as the call left them."""
    model = reference_model(sizes, seed)
    losses = kata.train(model, batches, steps, lr)
    with torch.no_grad():
        after = model(probe[0], probe[1][:, :-1])
    listed = isinstance(losses, (list, tuple))
    return {
        "losses": [detached(x) for x in losses] if listed else detached(losses),
        "kinds": [type(x).__name__ for x in losses] if listed else [],
        "logits after training": after,
        "batches": batches,
    }


def train_inputs(rng, gen, seed) -> dict:
    """Three batches of different lengths, padded (so they are cycled over 7 steps), the model's
    sizes (its ids drawn) and seed, the probe batch for the logits after training."""
    case = TRAIN_CASE
    pad_id, bos_id = rng.sample(range(case["Vt"]), 2)
    batches = []
    for _ in range(3):
        S, T = rng.randint(2, 7), rng.randint(3, 8)
        src = right_padded(gen, case["B"], S, case["Vs"], pad_id)
        tgt = right_padded(gen, case["B"], T, case["Vt"], pad_id)
        tgt[:, 0], tgt[:, 1] = bos_id, torch.where(tgt[:, 1] == pad_id, (pad_id + 1) % case["Vt"], tgt[:, 1])
        batches.append((src, tgt))
    sizes = {k: case[k] for k in ("Vs", "Vt", "E", "H", "Le", "Ld", "F")} | {"pad_id": pad_id}
    probe = tuple(t.clone() for t in batches[0])  # its own tensors: an in-place slip on the batches leaves it alone
    return {"sizes": sizes, "seed": seed, "batches": batches, "steps": STEPS, "lr": TRAIN_LR, "probe": probe}


def trained(implementation, inputs: dict) -> dict:
    return training(implementation, *inputs.values())


def as_losses(values):
    """A list of Python numbers or 0-d tensors as float64 [steps]; anything else as it came."""
    if isinstance(values, list) and all(
        (isinstance(x, (float, int)) and not isinstance(x, bool)) or (isinstance(x, Tensor) and x.numel() == 1)
        for x in values
    ):
        return torch.tensor([float(x) for x in values], dtype=torch.float64)
    return values


TRAIN_CALL = pick(
    f"train(model, batches=[3 pairs of (int64[4, S], int64[4, T + 1])], steps={STEPS}, lr={TRAIN_LR})",
    f"train(model, batches=[3 对 (int64[4, S], int64[4, T + 1])], steps={STEPS}, lr={TRAIN_LR})",
)


@core(zh="train 在移位后的目标上用 Adam 更新，并裁剪梯度")
def test_train_makes_the_updates_of_adam_with_clipped_gradients_on_shifted_targets(kata, rng, gen, seed):
    """train(model, batches, 7, lr) against reference_train on copies of one ReferenceSeq2Seq:
    the losses it returns (one per step) and the model's logits afterwards. Three batches of
    different lengths, padded, so they are cycled; lr 0.01. The model's gradient norm starts
    above 1, so clipping shows."""
    inputs, call = train_inputs(rng, gen, seed), TRAIN_CALL
    reference = reference_model(inputs["sizes"], seed)
    want_losses = torch.tensor(reference_train(reference, inputs["batches"], STEPS, TRAIN_LR), dtype=torch.float64)
    with torch.no_grad():
        probe = inputs["probe"]
        want_after = reference(probe[0], probe[1][:, :-1])

    def replay(implementation) -> dict:
        got = trained(implementation, inputs)
        return {"losses": as_losses(got["losses"]), "logits after training": got["logits after training"]}

    with TRAIN_CASE.judged(), SPEC.diagnosing(replay, {"B": TRAIN_CASE["B"]}):
        result = replay(kata)
        losses = result["losses"]
        if not isinstance(losses, Tensor):
            kinds = sorted({type(x).__name__ for x in losses}) if isinstance(losses, (list, tuple)) else []
            raise AssertionError(  # noqa: TRY004 - a failed check, reported as such
                pick(
                    f"{call} returned {describe(losses)}"
                    + (f" holding {', '.join(kinds)}" if kinds else "")
                    + f"; expected a list of {STEPS} losses, loss.item() of each step",
                    f"{call} 返回了 {describe(losses)}"
                    + (f"，其中包含 {', '.join(kinds)}" if kinds else "")
                    + f"；应返回含 {STEPS} 个 loss 的列表，即每一步的 loss.item()",
                )
            )
        if losses.numel() != STEPS:
            raise Mismatch(
                pick(
                    f"{call} returned {losses.numel()} losses; expected {STEPS}, one per step: when the batches run "
                    "out, start them again (itertools.cycle)",
                    f"{call} 返回了 {losses.numel()} 个 loss；应为 {STEPS} 个，每步一个：批次用完后从头再来"
                    "（itertools.cycle）",
                ),
                what="losses",
                actual=losses,
                expected=want_losses,
                kind_only=True,
            )
        check_property(
            losses,
            want_losses,
            call=call,
            what="losses",
            tolerance=TRAIN_TOLERANCE,
            text=pick(
                f"{call}: the losses differ from the reference loop's on the same model and batches: each step "
                "tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:], loss_fn(model(src, tgt_in), tgt_out, model.pad_id), "
                "optimizer.zero_grad(), loss.backward(), clip_grad_norm_(model.parameters(), 1.0), "
                "optimizer.step(), with ONE torch.optim.Adam(model.parameters(), lr=lr) made before the loop.",
                f"{call}：在相同的模型和批次上，返回的 losses 与参考训练循环的不同：每一步依次是 "
                "tgt_in = tgt[:, :-1]，tgt_out = tgt[:, 1:]，loss_fn(model(src, tgt_in), tgt_out, model.pad_id)，"
                "optimizer.zero_grad()，loss.backward()，clip_grad_norm_(model.parameters(), 1.0)，"
                "optimizer.step()；并且只在循环之前创建【一个】torch.optim.Adam(model.parameters(), lr=lr)。",
            ),
        )
        check_property(
            result["logits after training"],
            want_after,
            call=call,
            what="logits after training",
            tolerance=TRAIN_TOLERANCE,
            text=pick(
                f"{call}: the model after training differs from the reference loop's (the last update?)",
                f"{call}：训练后的模型与参考训练循环得到的不同（最后一次更新？）",
            ),
        )


@convention(
    "the losses are Python floats (loss.item()): no tensor that keeps a step's graph alive.",
    zh="train 返回 Python float",
)
def test_train_returns_python_floats(kata, rng, gen, seed):
    inputs = train_inputs(rng, gen, seed)

    def replay(implementation) -> dict:
        return {"kinds": trained(implementation, inputs)["kinds"]}

    with TRAIN_CASE.judged(), SPEC.diagnosing(replay, {"B": TRAIN_CASE["B"]}):
        kinds = replay(kata)["kinds"]
        others = sorted({kind for kind in kinds if kind != "float"})
        if others:
            raise AssertionError(
                pick(
                    f"{TRAIN_CALL} returned a list holding {', '.join(others)}; expected {STEPS} Python floats, "
                    "loss.item() of each step",
                    f"{TRAIN_CALL} 返回的列表中包含 {', '.join(others)}；应为 {STEPS} 个 Python float，"
                    "即每一步的 loss.item()",
                )
            )


@convention("the batches are never changed in place.", zh="train 不修改批次")
def test_train_does_not_modify_its_batches(kata, rng, gen, seed):
    inputs = train_inputs(rng, gen, seed)
    sent = {f"batches[{i}][{j}]": t for i, pair in enumerate(inputs["batches"]) for j, t in enumerate(pair)}

    def check(implementation) -> dict:
        after = trained(implementation, inputs)["batches"]
        came = {f"batches[{i}][{j}]": t for i, pair in enumerate(after) for j, t in enumerate(pair)}
        assert_inputs_unchanged(TRAIN_CALL, sent, came)
        return {}

    with TRAIN_CASE.judged(), SPEC.diagnosing(check, {"B": TRAIN_CASE["B"]}):
        check(kata)


# --------------------------------------------------------------------------- training, last

# The toy task: source tokens are digits 0-9 (ids 0-9) and letters a-f (ids 10-15); the
# target has the same ids for 0-9 and A-F. Specials after them.
DIGITS, LETTERS = 10, 6
CONTENT = DIGITS + LETTERS
PAD_ID, BOS_ID, EOS_ID = CONTENT, CONTENT + 1, CONTENT + 2  # 16, 17, 18: none of them 0, 1 or 2
VOCAB = CONTENT + 3
MIN_TOKENS, MAX_TOKENS = 1, 6  # source tokens per pair
INIT_SEED, DATA_SEED = 0, 1000
TRAIN_STEPS, BATCH_SIZE, LR = 500, 32, 1e-3
HELD_OUT = 200
ACCURACY = 0.9
MODEL_SIZE = {"d_model": 32, "nhead": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": 64}
TASK_MAX_LEN = 16


def translate(source: list[int]) -> list[int]:
    """Letters upper-cased (same id), each digit d -> 9 - d, the sequence reversed, its first
    token doubled: a3b -> A6B -> B6A -> BB6A."""
    mapped = [9 - t if t < DIGITS else t for t in source][::-1]
    return [mapped[0], *mapped]


def task_sequences(rng: random.Random, count: int, exclude=frozenset()) -> list[tuple]:
    found, seen = [], set(exclude)
    while len(found) < count:
        sequence = tuple(rng.randrange(CONTENT) for _ in range(rng.randint(MIN_TOKENS, MAX_TOKENS)))
        if sequence not in seen:
            seen.add(sequence)
            found.append(sequence)
    return found


def task_batch(sequences) -> tuple[Tensor, Tensor]:
    """(src [B, S], tgt [B, T + 1]): BOS + tokens + EOS on both sides, padded on the right."""
    sources = [[BOS_ID, *s, EOS_ID] for s in sequences]
    targets = [[BOS_ID, *translate(list(s)), EOS_ID] for s in sequences]
    S, T = max(map(len, sources)), max(map(len, targets))
    src = torch.tensor([row + [PAD_ID] * (S - len(row)) for row in sources])
    tgt = torch.tensor([row + [PAD_ID] * (T - len(row)) for row in targets])
    return src, tgt


def task_data(seed: int = DATA_SEED):
    """TRAIN_STEPS batches of BATCH_SIZE distinct pairs (each seen once) and HELD_OUT others."""
    rng = random.Random(seed)
    train = task_sequences(rng, TRAIN_STEPS * BATCH_SIZE)
    held_out = task_sequences(rng, HELD_OUT, exclude=frozenset(train))
    batches = [task_batch(train[i : i + BATCH_SIZE]) for i in range(0, len(train), BATCH_SIZE)]
    return batches, held_out


@torch.no_grad()
def reference_greedy(model: nn.Module, src: Tensor, bos_id: int, eos_id: int, max_len: int) -> Tensor:
    """Greedy decoding as the kata's docstring says it (the training test's decoder)."""
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not bool(done.all()):
        token = model(src, ys)[:, -1].argmax(-1).masked_fill(done, model.pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        done |= token == eos_id
    return ys


@scenario
def trained_translator(kata, init_seed: int, data_seed: int, src: Tensor, max_len: int) -> dict:
    """The learner's Seq2SeqTransformer (MODEL_SIZE) from torch.manual_seed(init_seed), trained by
    its train() on task_data(data_seed)'s batches, then in eval() mode decoded by
    reference_greedy on the held-out sources `src`: the tokens, and the last 10 losses."""
    batches, _ = task_data(data_seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = kata.Seq2SeqTransformer(VOCAB, VOCAB, **MODEL_SIZE, dropout=0.0, pad_id=PAD_ID, max_len=TASK_MAX_LEN)
    losses = kata.train(model, batches, TRAIN_STEPS, LR)
    model.eval()
    ys = reference_greedy(model, src, BOS_ID, EOS_ID, max_len)
    try:
        tail = [float(x) for x in list(losses)[-10:]]
    except (TypeError, ValueError, RuntimeError):
        tail = []
    return {"tokens": ys, "last losses": tail}


def train_and_score(implementation, init_seed: int = INIT_SEED, data_seed: int = DATA_SEED) -> dict:
    """Build, train with the implementation's train(), decode the held-out pairs greedily (the
    test's decoder), where the implementation lives; scored here: {accuracy, final_loss,
    wrong: [(source, got, expected)]}."""
    _, held_out = task_data(data_seed)
    src, tgt = task_batch(held_out)
    result = trained_translator(implementation, init_seed, data_seed, src, tgt.size(1) + 1)
    wrong = []
    for source, row, want in zip(held_out, result["tokens"].tolist(), tgt.tolist()):
        want = [t for t in want if t != PAD_ID]
        got = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        if got != want:
            wrong.append((source, got, want))
    tail = result["last losses"]
    return {
        "accuracy": 1 - len(wrong) / len(held_out),
        "final_loss": sum(tail) / len(tail) if tail else float("nan"),
        "wrong": wrong,
    }


def spelled(ids: list[int], *, target: bool) -> str:
    names = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}
    letters = "ABCDEF" if target else "abcdef"
    return "".join(names.get(t, str(t) if t < DIGITS else letters[t - DIGITS]) for t in ids)


@core(zh="用 train 训练的小型翻译模型在 90% 的留出句对上完全正确")
def test_a_small_translator_trained_with_train_gets_90_percent_of_held_out_pairs_exactly_right(kata):
    """The toy task end to end (see the module docstring): TRAIN_STEPS steps, then greedy
    decoding of HELD_OUT unseen pairs; the solution reaches 99-100% on every seed tried."""
    result = train_and_score(kata)
    if result["accuracy"] < ACCURACY:
        examples = "; ".join(
            pick(
                f"{spelled(list(s), target=False)} -> {spelled(got, target=True)} "
                f"(expected {spelled(want, target=True)})",
                f"{spelled(list(s), target=False)} -> {spelled(got, target=True)}（期望 {spelled(want, target=True)}）",
            )
            for s, got, want in result["wrong"][:3]
        )
        sizes = ", ".join(f"{k}={v}" for k, v in MODEL_SIZE.items())
        raise AssertionError(
            pick(
                f"after train(model, batches, steps={TRAIN_STEPS}, lr={LR}) on {TRAIN_STEPS} batches of {BATCH_SIZE} "
                f"pairs (Seq2SeqTransformer({VOCAB}, {VOCAB}, {sizes}, "
                f"pad_id={PAD_ID}, max_len={TASK_MAX_LEN}), torch.manual_seed({INIT_SEED}) first), greedy decoding "
                f"got {result['accuracy']:.1%} of {HELD_OUT} held-out pairs exactly right; at least {ACCURACY:.0%} "
                "expected (the reference solution reaches 99-100%). Mean loss of the last 10 steps: "
                f"{result['final_loss']:.4f}. For example: {examples}. If every other test passes, look at what only training shows: the "
                "embeddings' init (N(0, d_model ** -0.5)) and their sqrt(d_model) scale, the positional encodings, "
                "which masks reach which attention.",
                f"用 train(model, batches, steps={TRAIN_STEPS}, lr={LR}) 在 {TRAIN_STEPS} 个各含 {BATCH_SIZE} 个句对的"
                f"批次上训练之后（Seq2SeqTransformer({VOCAB}, {VOCAB}, {sizes}, pad_id={PAD_ID}, "
                f"max_len={TASK_MAX_LEN})，事先调用 torch.manual_seed({INIT_SEED})），"
                f"贪心解码在 {HELD_OUT} 个留出句对中只有 {result['accuracy']:.1%} 完全正确；至少应为 {ACCURACY:.0%}（参考解能达到 99-100%）。"
                f"最后 10 步的平均 loss：{result['final_loss']:.4f}。例如：{examples}。如果其他测试都通过了，"
                "就检查只有训练才会暴露的地方：嵌入的初始化（N(0, d_model ** -0.5)）和 sqrt(d_model) 缩放、"
                "位置编码、哪些掩码作用在哪个注意力上。",
            )
        )

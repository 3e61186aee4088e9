"""causal_lm: training, one `training` scenario playing the whole run where the kata lives
(see common.py): Adam through forward(input_ids, targets) on a small fixed corpus must bring
the loss below a threshold."""

import math

import torch
from torch import nn

from judge.language import pick
from judge.testing.spec import Case
from judge.testing.tiers import core

from .common import (
    SPEC,
    TOLERANCES,
    Reference,
    answer,
    build,
    one_thread,  # noqa: F401 - an autouse fixture
    training,
)
from .judging import assert_close, forward_text

# A small fixed corpus, characters as tokens (15 of them). Its empirical conditional
# entropies: 2.36 nats from no context, 0.94 from the previous character, 0.37 from the two
# before: a model below 0.94 uses more context than one token, through its attention.
CORPUS = (
    "the cat sat on the mat. the dog sat on the log. "
    "a cat and a dog sat on a mat and a log. "
    "the cat saw the dog and the dog saw the cat. "
)
TRAIN = {"d_model": 32, "num_heads": 4, "num_layers": 2, "T": 16, "B": 16, "steps": 120, "lr": 1e-2}
THRESHOLD = 0.7


def gpt2_initialise(gen):
    """GPT-2's initialisation in float64: Linear and Embedding weights N(0, 0.02^2), biases 0,
    LayerNorm weights 1."""

    @torch.no_grad()
    def initialise(reference: Reference) -> None:
        for sub in reference.modules():
            for name, p in sub.named_parameters(recurse=False):
                if isinstance(sub, nn.LayerNorm) and name == "weight":
                    p.fill_(1.0)
                elif name == "bias":
                    p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.02)

    return initialise


@core(zh="用 Adam 训练能把 loss 降到阈值以下")
def test_training_with_adam_brings_the_loss_below_the_threshold(kata, rng, gen):
    """120 steps of Adam (lr 1e-2) on batches of 16 random windows of 16 characters of CORPUS,
    through forward(input_ids, targets) with targets = input_ids shifted by one (shifted here,
    by the caller); then the loss over every window must be below 0.7, under the 0.94 nats a
    model of the previous character alone can reach.

    The model starts from GPT-2's initialisation (copied in by name, so every correct model
    starts alike), and its loss over the corpus before any step must be the reference's. The
    whole run is one scenario where the kata lives (the batches drawn here, from the test's
    generator). Measured over 20 seeds (0-19): the solution ends at 0.25-0.39, the three
    variants at 0.24-0.40; the steps take 0.5-1.1 s of CPU (one thread). The loss before
    training is diagnosed by replaying the same scenario with no step on each known slip; the
    loss after it is not: training every known slip again would outlast the test's time
    limit, so the message names what to check instead."""
    chars = sorted(set(CORPUS))
    data = torch.tensor([chars.index(c) for c in CORPUS])
    s = TRAIN
    sizes = {"B": s["B"], "T": s["T"], "V": len(chars), "E": s["d_model"], "H": s["num_heads"]}
    case = Case("training", sizes | {"layers": s["num_layers"], "M": s["T"], "F": 4 * s["d_model"]}, zh="训练")
    windows = torch.stack([data[i : i + s["T"] + 1] for i in range(len(data) - s["T"])])  # (W, T + 1)
    with case.judged():
        model = build(gen, case, defaults=True, initialise=gpt2_initialise(gen))
        batches = torch.randint(len(windows), (s["steps"], s["B"]), generator=gen)  # the rows of each step
        shape = torch.empty(s["B"], s["T"], dtype=torch.int64)
        text = forward_text(model, shape, targets=shape)
        every = forward_text(model, windows[:, :-1], targets=windows[:, 1:])

        def before_training(implementation) -> dict:
            return {
                "loss before training": answer(training(implementation, model.recipe, windows, batches[:0], s["lr"]))[
                    "start"
                ]
            }

        with SPEC.diagnosing(before_training, case):
            got = answer(training(kata, model.recipe, windows, batches, s["lr"]))
            expected = model.reference.loss(windows[:, :-1], windows[:, 1:]).detach().float()
            call = pick(f"{every} before training, from GPT-2's initialisation,", f"{every}（训练前，GPT-2 的初始化）")
            what = "loss before training"
            assert_close(got["start"], expected, call=call, what=what, tolerance=TOLERANCES[torch.float32])
        end = got["end"]
        if not isinstance(end, torch.Tensor) or end.numel() != 1 or not bool(end < THRESHOLD):
            shown = f"{float(end):.3f}" if isinstance(end, torch.Tensor) and end.numel() == 1 else repr(end)
            raise AssertionError(
                pick(
                    f"after {s['steps']} steps of Adam (lr {s['lr']}) through {text}, the loss over the corpus is "
                    f"{shown} (it started at {float(got['start']):.3f}, ln V = {math.log(len(chars)):.3f}); a correct "
                    f"model gets below {THRESHOLD} (measured at most 0.40). Does every parameter get its gradient "
                    "(nothing detached)? Is the loss the mean over the positions as given? "
                    f"({got['cpu seconds']:.1f} s of CPU)",
                    f"经 {text} 用 Adam（lr {s['lr']}）训练 {s['steps']} 步后，语料上的 loss 是 {shown}（起始为 "
                    f"{float(got['start']):.3f}，ln(V) = {math.log(len(chars)):.3f}）；正确的模型能降到 {THRESHOLD} "
                    "以下（实测最多 0.40）。每个参数都得到梯度了吗（没有被 detach 的）？loss 是按给定的各个位置求的"
                    f"平均吗？（CPU 用时 {got['cpu seconds']:.1f} 秒）",
                )
            )

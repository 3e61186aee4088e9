"""dpo: gradients by autograd through the kata against autograd through the float64
references: sequence_log_probs's, dpo_loss's, and end to end from the loss back to the
policy's logits (see common.py)."""

import torch

from judge.language import pick, tr
from judge.testing.checks import describe
from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    FULL,
    NAMES,
    SPEC,
    check_dpo_gradients,
    check_log_probs_gradient,
    custom_ignore_index,
    dpo_kwargs,
    end_to_end,
    end_to_end_tolerance,
    make_inputs,
    make_logps,
    randn,
    reference_dpo,
    reference_log_probs,
    sizes,
)


@core(zh="sequence_log_probs 的梯度传到 logits，与经过 PyTorch 的 autograd 一致")
@dtypes(*FULL)
def test_gradients_of_sequence_log_probs_reach_the_logits_like_autograd_through_pytorch(kata, rng, gen, dtype):
    """Autograd through the kata against autograd through F.cross_entropy on the shifted
    logits: zero at the last position and wherever the label is ignored; ordinary and large
    logits (log(softmax) gives NaN gradients where its probabilities underflow)."""
    first, second = CASES.random(rng, 2)
    for case, large in ((CASES.edges[0], False), (CASES.edges[2], True), (first, False), (second, True)):
        with case.judged():
            ignore_index = rng.choice((-100, custom_ignore_index(rng, case)))
            logits, labels = make_inputs(gen, case, dtype, ignore_index=ignore_index, large=large)
            upstream = randn(gen, case["B"], dtype=dtype)
            check_log_probs_gradient(kata, case, logits, labels, upstream, ignore_index=ignore_index)


@core(zh="dpo_loss 的梯度传到全部四个对数概率")
@dtypes(*FULL)
def test_gradients_of_dpo_loss_reach_all_four_log_probabilities(kata, rng, gen, dtype):
    """Autograd through the kata against autograd through the formula with F.logsigmoid: the
    reference model's log-probabilities get a gradient too (they flow through z)."""
    for case in (CASES.edges[0], *CASES.random(rng, 2)):
        with case.judged():
            kwargs = dpo_kwargs(rng, smoothing=rng.random() < 0.5)
            logps, upstream = make_logps(gen, case["B"], dtype), randn(gen, case["B"], dtype=dtype)
            check_dpo_gradients(kata, logps, upstream, **kwargs)


def gradients_of(implementation, text: str, logits, labels, reference, upstream, kwargs) -> dict:
    """The end_to_end scenario's gradients as {what: gradient}; a message when autograd lost track."""
    got = end_to_end(implementation, logits, labels, reference, upstream, kwargs)
    if not got["requires_grad"]:
        raise AssertionError(
            pick(
                f"{text}: losses does not require grad; autograd lost track of the inputs "
                "(no .detach(), .item(), numpy or torch.no_grad() on the way to it)",
                f"{text}：losses 不需要梯度（requires_grad=False）；autograd 跟丢了输入"
                "（得到它的路径上不能有 .detach()、.item()、numpy 或 torch.no_grad()）",
            )
        )
    found = {}
    for name, grad in got["grads"].items():
        if grad is None:
            raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text, name=name))
        found[f"the gradient of `{name}`"] = grad
    return found


@core(zh="梯度从损失一路流回策略的 logits")
@dtypes(*FULL)
def test_gradients_flow_from_the_loss_back_to_the_policy_logits(kata, rng, gen, dtype):
    """End to end: policy logits of the chosen and the rejected sequences -> sequence_log_probs
    -> dpo_loss (with fixed reference log-probabilities) -> the losses weighted and summed."""
    for case in (CASES.edges[0], CASES.random(rng)[0]):
        with case.judged():
            kwargs = dpo_kwargs(rng, smoothing=rng.random() < 0.5)
            beta = kwargs.get("beta", 0.1)
            chosen, chosen_labels = make_inputs(gen, case, dtype)
            rejected, rejected_labels = make_inputs(gen, case, dtype)
            reference = (
                reference_log_probs(chosen, chosen_labels) + randn(gen, case["B"], dtype=dtype, std=3.0),
                reference_log_probs(rejected, rejected_labels) + randn(gen, case["B"], dtype=dtype, std=3.0),
            )
            upstream = randn(gen, case["B"], dtype=dtype)
            text = (
                f"dpo_loss(sequence_log_probs({describe(chosen)}, ...), sequence_log_probs({describe(rejected)}, ...), "
                f"{describe(reference[0])}, {describe(reference[1])}"
                + "".join(f", {k}={v!r}" for k, v in kwargs.items())
                + ").backward"
            )
            twins = [chosen.detach().double().requires_grad_(), rejected.detach().double().requires_grad_()]
            with torch.enable_grad():
                logps = {
                    NAMES[0]: reference_log_probs(twins[0], chosen_labels),
                    NAMES[1]: reference_log_probs(twins[1], rejected_labels),
                    NAMES[2]: reference[0].double(),
                    NAMES[3]: reference[1].double(),
                }
                losses = reference_dpo(logps, **kwargs, rounded=False)["losses"]
                grads = torch.autograd.grad((losses * upstream.double()).sum(), twins)
            want = {
                "the gradient of `chosen logits`": grads[0].to(dtype),
                "the gradient of `rejected logits`": grads[1].to(dtype),
            }
            tolerance = end_to_end_tolerance(
                (chosen, rejected), (chosen_labels, rejected_labels), logps, beta, upstream
            )
            inputs = ((chosen, rejected), (chosen_labels, rejected_labels), reference, upstream, kwargs)

            def replay(implementation, text=text, inputs=inputs) -> dict:
                return gradients_of(implementation, text, *inputs)

            with SPEC.diagnosing(replay, sizes(case)):
                got = replay(kata)
                for what, expected in want.items():
                    SPEC.assert_close(got[what], expected, call=text, what=what, tolerance=tolerance)

"""What the attention function katas share (scaled_dot_product_attention, attention_backward,
attention_function): the case table, custom scales, and for the two backward katas their
inputs, their judges (autograd in float64) and how their gradients are compared."""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

from judge.language import tr
from judge.testing.checks import assert_close, check_tensor_kind
from judge.testing.inputs import randn
from judge.testing.spec import CaseTable, core_dtype, edge
from judge.testing.tolerances import SINGLE_OP

# Custom scales are taken relative to the default 1/sqrt(E): with unit-normal inputs the
# scores then keep a spread of 0.4 to 2.2 whatever the head size, so the softmax never
# saturates (nearly one-hot rows hide a wrong scale) and never stays flat. Never near 1,
# so a kata that ignores `scale` differs from one that uses it.
SCALE_FACTORS = (0.4, 0.6, 1.6, 2.2)


def relative_scale(rng: random.Random, E: int) -> float:
    """A custom scale 0.4x to 2.2x the default 1/sqrt(E)."""
    return round(rng.choice(SCALE_FACTORS) / math.sqrt(E), 6)


def attention_shapes(rng: random.Random, count: int, largest: int = 13) -> list[dict]:
    """Shapes in which every size differs: leading dims (), (B,) or (B, H), then L, S, E, Ev.
    The first case has L < S and the second L > S."""
    cases = []
    for index, n_lead in enumerate(rng.choices([0, 1, 2, 2], k=count)):
        sizes = rng.sample(range(2, largest + 1), 4 + n_lead)
        lead, (L, S, E, Ev) = sizes[:n_lead], sizes[n_lead:]
        if index < 2 and (L < S) != (index == 0):
            L, S = S, L
        cases.append({"lead": lead, "L": L, "S": S, "E": E, "Ev": Ev})
    return cases


# Named edge cases, run every time: each size 1 in turn, more queries than keys (causal
# rows past the last key), no leading dims and two of them, odd sizes throughout.
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("odd sizes, two leading dims", "奇数尺寸，两个前导维", lead=[3, 5], L=9, S=7, E=11, Ev=13),
    edge("value size 1, more queries than keys", "value 维度为 1，查询比键多", lead=[3], L=7, S=2, E=4, Ev=1),
    edge("head size 1", "头维度为 1", lead=[2, 4], L=3, S=6, E=1, Ev=5),
    edge("one key", "只有一个键", lead=[2], L=4, S=1, E=3, Ev=5),
    edge("one query", "只有一个查询", lead=[], L=1, S=5, E=3, Ev=4),
)


def case_table(largest: int = 13, draws: int = 4) -> CaseTable:
    return CaseTable(draw=lambda rng, count: attention_shapes(rng, count, largest), edges=EDGES, draws=draws)


# --------------------------------------------------------------------------- the backward katas

GRADIENTS = ("grad_query", "grad_key", "grad_value")

# float64 uses the shared tolerances. For float32 the atol is 5x the shared one: a backward
# pass sums terms that cancel (grad_weights - rowsum(grad_weights * weights)), so a correct
# kata's error follows the size of those terms, not of each result. Measured over 8400
# float32 gradients from four correct styles (the FlashAttention D trick the worst): at most
# 9.5e-6 off, for gradients up to 11. Wrong formulas are off by more than 1e-2.
GRAD_TOLERANCES = {
    torch.float64: SINGLE_OP[torch.float64],
    torch.float32: {"rtol": 1.3e-6, "atol": 5e-5},
}


def backward_inputs(gen, case, dtype, device) -> tuple[torch.Tensor, ...]:
    """query, key, value, grad_output: unit normals, the same numbers for every dtype."""
    lead = case["lead"]
    query = randn(gen, *lead, case["L"], case["E"], dtype=dtype, device=device)
    key = randn(gen, *lead, case["S"], case["E"], dtype=dtype, device=device)
    value = randn(gen, *lead, case["S"], case["Ev"], dtype=dtype, device=device)
    grad_output = randn(gen, *lead, case["L"], case["Ev"], dtype=dtype, device=device)
    return query, key, value, grad_output


def backward_sizes(inputs) -> dict:
    """The sizes a diagnosis may name (a factor of sqrt(E), say)."""
    query, key, value = inputs[:3]
    return {"L": query.size(-2), "S": key.size(-2), "E": query.size(-1), "Ev": value.size(-1)}


def _leaves(query, key, value):
    return [t.detach().double().requires_grad_() for t in (query, key, value)]


def sdpa_gradients(query, key, value, grad_output, *, is_causal=False, scale=None) -> dict:
    """Autograd through F.scaled_dot_product_attention, in float64 on the inputs' device,
    rounded to the inputs' dtype: {grad_query, grad_key, grad_value}."""
    leaves = _leaves(query, key, value)
    with torch.enable_grad():
        output = F.scaled_dot_product_attention(*leaves, is_causal=is_causal, scale=scale)
        grads = torch.autograd.grad(output, leaves, grad_output.double())
    return {name: grad.to(query.dtype) for name, grad in zip(GRADIENTS, grads)}


def eager_gradients(query, key, value, grad_output, *, is_causal=False, scale=None) -> dict:
    """Autograd through softmax(q k^T * scale + causal bias) v written out, in float64."""
    q, k, v = leaves = _leaves(query, key, value)
    L, S, E = q.size(-2), k.size(-2), q.size(-1)
    with torch.enable_grad():
        scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(E) if scale is None else scale)
        if is_causal:  # -inf strictly above the main diagonal: key j > query i is blocked
            scores = scores + torch.full((L, S), -math.inf, dtype=q.dtype, device=q.device).triu(1)
        output = torch.softmax(scores, dim=-1) @ v
        grads = torch.autograd.grad(output, leaves, grad_output.double())
    return {name: grad.to(query.dtype) for name, grad in zip(GRADIENTS, grads)}


def gradient_hint(name: str) -> str:
    """What the first gradient found off says about where the slip is, in the learner's language."""
    hints = {
        "grad_value": tr(
            "grad_value needs only the weights and grad_output: check the recomputed weights "
            "(scale, causal mask) and the transpose."
        ),
        "grad_query": tr("grad_value is right, so the weights are: check the softmax backward and the scale."),
        "grad_key": tr("grad_query is right, so grad_scores is: check the transpose and the scale in grad_key."),
    }
    return hints[name]


def judge_gradients(call: str, got: dict, want: dict, *, float64_throughout: bool = False) -> None:
    """Kinds first (each gradient has its input's shape, dtype and device), then grad_value,
    grad_query, grad_key in that order (each depends on more of the derivation than the one
    before), with a hint for the first one that is off. float64 results get float32's
    tolerance unless float64_throughout (see spec.FLOAT64_RULE)."""
    for name in GRADIENTS:
        check_tensor_kind(got[name], want[name], call=call, what=name)
    for name in ("grad_value", "grad_query", "grad_key"):
        tolerance = GRAD_TOLERANCES[core_dtype(want[name].dtype, float64_throughout)]
        assert_close(got[name], want[name], call=call, what=name, tolerance=tolerance, hint=gradient_hint(name))

"""The case table shared by the attention function katas (scaled_dot_product_attention,
attention_backward, attention_function), and their custom scales."""

from __future__ import annotations

import math
import random

from judge.testing.spec import CaseTable, edge

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
    edge("odd sizes, two leading dims", lead=[3, 5], L=9, S=7, E=11, Ev=13),
    edge("value size 1, more queries than keys", lead=[3], L=7, S=2, E=4, Ev=1),
    edge("head size 1", lead=[2, 4], L=3, S=6, E=1, Ev=5),
    edge("one key", lead=[2], L=4, S=1, E=3, Ev=5),
    edge("one query", lead=[], L=1, S=5, E=3, Ev=4),
)


def case_table(largest: int = 13, draws: int = 4) -> CaseTable:
    return CaseTable(draw=lambda rng, count: attention_shapes(rng, count, largest), edges=EDGES, draws=draws)

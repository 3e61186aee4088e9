"""The two tiers of a kata's tests: the math, and the conventions.

core: what an interviewer checks: the values (and gradients, where the kata asks for them)
on float32/float64 inputs of the documented shapes, the named edge cases that test the math.

conventions: the production polish a docstring states beside the math: argument
validation, half-precision rules, graph hygiene, device placement, inputs left untouched,
degenerate inputs, names and layouts beyond what the weights need. A convention test
quotes the docstring line that states it; its failure says it is a convention.

Every test of a kata declares its tier (`@core` or `@convention("...")`), and with it the test's
title in Chinese (`@core(zh="...")`, `@convention("...", zh="...")`): the English title is the
function's name read as a sentence, shown to a learner who reads Chinese as the zh one. The plugin
refuses a kata test module with an undeclared one and runs the core tests first, so a run
stopped at its first failure tells which tier failed (each tier cheapest first: judge.costs).
`pass` needs both tiers.
"""

from __future__ import annotations

import pytest

from judge.protocol import Tier

CORE, CONVENTIONS = Tier.CORE.value, Tier.CONVENTIONS.value
TIERS = (CORE, CONVENTIONS)
MARKER = "kata_tier"

core = getattr(pytest.mark, MARKER)(CORE)


def convention(stub_says: str, zh: str = ""):
    """A test of a convention; `stub_says` quotes the stub's docstring line that states it,
    `zh` is the test's title in Chinese."""
    return getattr(pytest.mark, MARKER)(CONVENTIONS, stub_says=" ".join(stub_says.split()), zh=zh)


def tier_of(item) -> tuple[str | None, str]:
    """(the tier a test declares, or None; the docstring line a convention quotes, or "")."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return None, ""
    return marker.args[0], marker.kwargs.get("stub_says", "")


def title_zh(item) -> str:
    """The test's title in Chinese, as its tier declares it ("" when it does not)."""
    marker = item.get_closest_marker(MARKER)
    return marker.kwargs.get("zh", "") if marker is not None else ""

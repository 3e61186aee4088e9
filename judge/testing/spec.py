"""What a kata is judged by, declared once per kata: its KataSpec.

A kata's test module declares `SPEC = KataSpec(...)`: the public symbol the tests call,
the forbidden-call rules, the tolerances per dtype, the case table and the benchmark. The
kata process reads it to load and guard the kata, the timing mode to time it.

A CaseTable holds named edge cases, which run every time (size 1, odd sizes, the sizes
where a known slip shows), and a seeded draw of random hidden cases: random draws alone
miss slips that show only at some sizes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import pytest
import torch

from judge.forbidden import NONE, ForbiddenCallError, Rules
from judge.language import pick, tr
from judge.testing import checks
from judge.testing.tolerances import SINGLE_OP


def dtypes(*choices: torch.dtype):
    """Parametrize a test over dtypes, with readable ids: [float32], [bfloat16]."""
    return pytest.mark.parametrize("dtype", choices, ids=lambda d: str(d).removeprefix("torch."))


@dataclass(frozen=True)
class Case(Mapping):
    """One case of a table: its sizes (read as case["E"]) and a short description, with its
    Chinese twin `zh` shown to a learner who reads Chinese."""

    desc: str
    sizes: dict
    edge: bool = False
    zh: str = ""

    def __getitem__(self, key):
        return self.sizes[key]

    def __iter__(self) -> Iterator:
        return iter(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __or__(self, other: Mapping) -> Case:
        return Case(self.desc, {**self.sizes, **other}, self.edge, self.zh)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={_value(v)}" for k, v in self.sizes.items())
        desc = pick(self.desc, self.zh)
        if self.edge:
            return tr("edge case '{desc}' ({sizes})", desc=desc, sizes=shown)
        return tr("hidden case '{desc}' ({sizes})", desc=desc, sizes=shown)

    def judged(self):
        """Context manager: a failing check inside names this case first."""
        return _Judged(self)


def _value(value) -> str:
    """A size as a failure shows it: a value given in words (kind="draft equals target") is the
    test's own key, code in either language, so it is quoted as code (`draft equals target`)."""
    return f"`{value}`" if isinstance(value, str) and " " in value else str(value)


class _Judged:
    def __init__(self, case: Case):
        self.case = case

    def __enter__(self):
        return self.case

    def __exit__(self, kind, error, traceback):
        if isinstance(error, Exception) and not isinstance(error, _UNNAMED) and not getattr(error, "case_named", False):
            error.args = (tr("{case}: {text}", case=self.case, text=error),)  # in place: its type and diagnosis stay
            if hasattr(error, "kata_error"):  # raised by the kata: the learner reads the kata process's text
                kind, name, text = error.kata_error
                error.kata_error = (kind, name, tr("{case}: {text}", case=self.case, text=text))
            error.case_named = True
        return False


# Failures whose message is already complete without the case (the stub, a refusal, a load error).
_UNNAMED = (NotImplementedError, ForbiddenCallError, pytest.skip.Exception)


def edge(desc: str, zh: str = "", /, **sizes) -> Case:
    """A named edge case: edge("odd length", "奇数长度", n=7)."""
    return Case(desc, sizes, edge=True, zh=zh)


@dataclass(frozen=True)
class CaseTable:
    """Named edge cases plus `draws` random cases from `draw(rng, count) -> [sizes]`."""

    draw: Callable[[random.Random, int], list[dict]]
    edges: tuple[Case, ...] = ()
    draws: int = 3

    def random(self, rng: random.Random, count: int | None = None) -> list[Case]:
        count = self.draws if count is None else count
        return [Case(tr("random draw {n}", n=n + 1), sizes) for n, sizes in enumerate(self.draw(rng, count))]

    def cases(self, rng: random.Random, count: int | None = None, *, edges: bool = True) -> list[Case]:
        """Every edge case, then the random draws: what a main comparison runs through.
        A test parametrised over dtypes runs the edge cases in one of them (edges=False in
        the others): a slip in sizes shows in any dtype, so once is enough."""
        return [*(self.edges if edges else ()), *self.random(rng, count)]


@dataclass(frozen=True)
class KataSpec:
    """What a kata is judged by.

    kata: its name (info.toml, katas/NAME.py). symbol: the function or class the tests call.
    forbidden: the calls it may not make while its code runs. also: the kata's other public
    symbols, each with its own rules (softmax and log_softmax, a forward and its backward). tolerances: dtype -> {rtol,
    atol} for its results (tight: what an honest implementation in that dtype reaches).
    An empty `tolerances` means results are compared exactly. cases: its case table.
    reference: how the expected result is computed, in words. benchmark(kata, device) -> (kata call, reference
    call) at a realistic size, for the grader's timing."""

    kata: str
    symbol: str
    reference: str
    forbidden: Rules = NONE
    tolerances: Mapping = field(default_factory=lambda: SINGLE_OP)
    cases: CaseTable | None = None
    benchmark: Callable | None = None
    tolerance_note: str = ""  # how the tolerances were set, or what is added to them, for the README
    also: Mapping = field(default_factory=dict)  # more public symbols -> their own forbidden rules
    world: bool = False  # a distributed kata: its scenarios run on the ranks of worlds (judge.worlds)
    per_case_tolerance: bool = False  # tolerances computed per case (the note says how), not a table

    @property
    def guarded_symbols(self) -> dict:
        """Every public symbol the tests call, with the rules its code runs under."""
        return {self.symbol: self.forbidden, **self.also}

    def tolerance(self, dtype: torch.dtype, *, float64_throughout: bool = True) -> dict:
        """The tolerance for a result of `dtype`. The float64 rule (FLOAT64_RULE): the core
        tier accepts a float32 step inside a float64 computation (float64_throughout=False
        gives float32's tolerance to float64 results); one convention test holds float64
        results to float64's own."""
        return self.tolerances[core_dtype(dtype, float64_throughout)] if self.tolerances else {}

    def diagnosing(self, replay, sizes=None):
        """Context manager: a failing check inside says which known slip it looks like
        (see judge.testing.diagnosis); `replay(implementation)` gives {what: result}."""
        from judge.testing.diagnosis import diagnosing

        return diagnosing(self.kata, replay, dict(sizes or {}))

    def assert_close(
        self,
        actual,
        expected: torch.Tensor,
        *,
        call: str,
        what: str = "result",
        tolerance=None,
        float64_throughout=False,
    ) -> None:
        """checks.assert_close with this kata's tolerance for the expected result's dtype (the
        core tier's unless float64_throughout: see FLOAT64_RULE)."""
        tolerance = tolerance or self.tolerance(expected.dtype, float64_throughout=float64_throughout)
        checks.assert_close(actual, expected, call=call, what=what, tolerance=tolerance)


DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

# The one float64 rule of every kata that takes float64, stated in each such stub: the math
# is right when a float64 input goes through a float32 step (Hugging Face's and Meta's
# attention take the softmax in float32), so the core tier judges float64 results with the
# float32 tolerance; float64 computed in float64 throughout is a convention, judged by one
# test of that tier with float64's own tolerance.
FLOAT64_RULE = "float64 inputs are computed in float64 throughout (no step in float32)."


def core_dtype(dtype: torch.dtype, float64_throughout: bool) -> torch.dtype:
    """The dtype whose tolerance judges a result of `dtype` (see FLOAT64_RULE)."""
    return torch.float32 if dtype == torch.float64 and not float64_throughout else dtype


def tolerance_table(specs: list[KataSpec]) -> str:
    """The README's table of tolerances, (rtol, atol) per result dtype, from the specs."""
    rows = [
        "| kata | float64 | float32 | float16 | bfloat16 | note |",
        "|---|---|---|---|---|---|",
    ]
    for spec in specs:
        cells = []
        for dtype in DTYPES:
            tolerance = spec.tolerances.get(dtype)
            cells.append(f"{tolerance['rtol']:.2g}, {tolerance['atol']:.2g}" if tolerance else "-")
        if not spec.tolerances:
            cells = ["exact"] * len(DTYPES)
        if spec.per_case_tolerance:
            cells = ["per case" if dtype in (torch.float64, torch.float32) else "-" for dtype in DTYPES]
        note = spec.tolerance_note.replace("|", "\\|")  # a | inside a cell would end it
        rows.append(f"| `{spec.kata}` | {' | '.join(cells)} | {note} |")
    return "\n".join(rows)

"""The order a kata's tests run in: core first, then conventions, each tier cheapest first.

A grade stopped at its first failure (every mutant of `make test`) pays for every test it
passes before it, and a cheap test rejects a slip as well as a costly one. Measured here on
2026-11-29: the 121 mutants of decoder_layer, encoder_layer, kv_cache, lora, moe and
speculative_decoding took 61 s in file order and 49 s cheapest first (causal_lm's: 22 s and
13 s); the whole suite, 4% less (a mutant's first test also pays what a fresh process pays
for its first operations, whichever test that is). A learner's grade runs every test either
way, in the same order, so the slip a mutant proves named is the one a learner who makes it
is told.

What each test costs is measured on the solutions and kept in tests/costs.json (as
pytest-split keeps its durations file; Infection, PHP's mutation tester, runs a mutant's
tests fastest first): the time of its call, in milliseconds. The order uses classes of a
factor of two (cost_class), so that a test measured again at a slightly different time
keeps its place; within a class, file order. A test with no measured cost runs last in its
tier. `python grader.py costs` measures them all again (the suite says when a test has none).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from judge.paths import TESTS

COSTS = TESTS / "costs.json"
ABOUT = (
    "The call time of each kata test on the solutions, in ms, measured by `python grader.py costs`: "
    "it orders each tier's tests, cheapest first (judge/costs.py)."
)
UNMEASURED = 1_000  # the class of a test with no measured cost: after every measured one


def table_key(path: Path, nodeid: str) -> str:
    """A test's name in the table: its file under tests/ and its name there, whatever folder
    pytest's node ids start from."""
    return f"{Path(path).resolve().relative_to(TESTS).as_posix()}::{nodeid.split('::', 1)[1]}"


@functools.cache
def measured(path: Path = COSTS) -> dict[str, float]:
    """test key -> milliseconds; {} when the table is missing or unreadable (then file order)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))["ms"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def cost_of(key: str, costs: dict[str, float]) -> float | None:
    """The measured cost of the test `key`; a CUDA case costs what its CPU twin did (the table
    is measured where there may be no GPU)."""
    found = costs.get(key)
    return costs.get(key.replace("cuda", "cpu")) if found is None else found


def cost_class(ms: float | None) -> int:
    """Tests whose costs are within a factor of two of each other share a class."""
    return UNMEASURED if ms is None else max(0, round(math.log2(max(ms, 1.0))))


class Recorder:
    """(--store-costs FILE) Records the call time of each kata test and writes the table."""

    def __init__(self, path: Path):
        self.path = path
        self.keys: dict[str, str] = {}  # nodeid -> test key, for kata tests
        self.ms: dict[str, float] = {}

    def pytest_collection_finish(self, session):
        self.keys = {item.nodeid: table_key(item.path, item.nodeid) for item in session.items if is_kata_test(item)}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.nodeid in self.keys:
            self.ms[self.keys[report.nodeid]] = round(report.duration * 1000, 1)

    def pytest_sessionfinish(self, session):
        table = {"about": ABOUT, "ms": dict(sorted(self.ms.items()))}
        Path(self.path).write_text(json.dumps(table, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")


def is_kata_test(item) -> bool:
    return hasattr(getattr(item, "module", None), "SPEC")

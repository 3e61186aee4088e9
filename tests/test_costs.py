"""The run order of a kata's tests (judge.costs, judge.plugin.run_order): core first, each tier
cheapest first by the costs measured on the solutions, file order within a class of cost."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from judge import costs
from judge.costs import UNMEASURED, Recorder, cost_class, cost_of, is_kata_test, measured, table_key
from judge.paths import TESTS
from judge.plugin import run_order
from judge.testing.tiers import MARKER


class Spec:
    def __init__(self, kata: str):
        self.kata = kata


class Module:
    def __init__(self, kata: str | None):
        if kata:
            self.SPEC = Spec(kata)


class Item:
    """What run_order reads of a pytest item."""

    def __init__(self, name: str, tier: str | None, *, kata: str | None = "softmax", file: str = "test_softmax.py"):
        self.path = TESTS / file
        self.nodeid = f"tests/{file}::{name}"
        self.module = Module(kata)
        self.tier = tier

    def get_closest_marker(self, name):
        return pytest.mark.kata_tier(self.tier).mark if name == MARKER and self.tier else None


def order(items, table, monkeypatch) -> list[str]:
    monkeypatch.setattr(costs, "measured", lambda: table)
    return [item.nodeid.split("::")[1] for item in run_order(items)]


def test_core_first_then_each_tier_cheapest_first(monkeypatch):
    items = [
        Item("test_convention_slow", "conventions"),
        Item("test_core_slow", "core"),
        Item("test_convention_fast", "conventions"),
        Item("test_core_fast", "core"),
    ]
    table = {f"test_softmax.py::{n}": ms for n, ms in [("test_core_slow", 900), ("test_core_fast", 3)]}
    table |= {"test_softmax.py::test_convention_slow": 400, "test_softmax.py::test_convention_fast": 2}
    assert order(items, table, monkeypatch) == [
        "test_core_fast",
        "test_core_slow",
        "test_convention_fast",
        "test_convention_slow",
    ]


def test_tests_within_a_factor_of_two_keep_their_file_order(monkeypatch):
    items = [Item("test_first", "core"), Item("test_second", "core"), Item("test_third", "core")]
    table = {"test_softmax.py::test_first": 11, "test_softmax.py::test_second": 9, "test_softmax.py::test_third": 2}
    assert order(items, table, monkeypatch) == ["test_third", "test_first", "test_second"]


def test_an_unmeasured_test_runs_last_in_its_tier_and_a_cuda_case_costs_its_cpu_twin(monkeypatch):
    items = [Item("test_new", "core"), Item("test_old[cuda-float32]", "core"), Item("test_check", "conventions")]
    table = {"test_softmax.py::test_old[cpu-float32]": 40, "test_softmax.py::test_check": 1}
    assert order(items, table, monkeypatch) == ["test_old[cuda-float32]", "test_new", "test_check"]
    assert cost_class(None) == UNMEASURED
    assert cost_of("test_softmax.py::test_old[cuda-float32]", table) == 40


def test_each_katas_tests_stay_together_and_other_tests_keep_their_order(monkeypatch):
    items = [
        Item("test_a_grader_check", None, kata=None, file="test_grader.py"),
        Item("test_softmax_conventions", "conventions"),
        Item("test_mask", "core", kata="causal_mask", file="test_causal_mask.py"),
        Item("test_softmax_core", "core"),
        Item("test_another_grader_check", None, kata=None, file="test_grader.py"),
    ]
    assert order(items, {}, monkeypatch) == [
        "test_a_grader_check",
        "test_another_grader_check",
        "test_softmax_core",
        "test_softmax_conventions",
        "test_mask",
    ]


def test_the_recorder_keeps_the_call_time_of_each_kata_test_and_the_table_reads_back(tmp_path):
    class Report:
        def __init__(self, nodeid, when, duration):
            self.nodeid, self.when, self.duration = nodeid, when, duration

    session = SimpleNamespace(
        items=[Item("test_core", "core"), Item("test_a_grader_check", None, kata=None, file="test_grader.py")]
    )

    recorder = Recorder(tmp_path / "costs.json")
    recorder.pytest_collection_finish(session)
    for report in (
        Report("tests/test_softmax.py::test_core", "setup", 9.0),  # the kata's loading: not the test's
        Report("tests/test_softmax.py::test_core", "call", 0.01234),
        Report("tests/test_grader.py::test_a_grader_check", "call", 3.0),
    ):
        recorder.pytest_runtest_logreport(report)
    recorder.pytest_sessionfinish(session)
    assert measured(tmp_path / "costs.json") == {"test_softmax.py::test_core": 12.3}
    assert measured(tmp_path / "missing.json") == {}


def test_every_kata_test_has_a_measured_cost(request):
    """tests/costs.json names every kata test this run collected (but the CUDA cases, which
    cost what their CPU twins do): a test added since it was measured would run last."""
    kata_tests = [item for item in request.session.items if is_kata_test(item)]
    if not kata_tests:
        pytest.skip("run with the kata tests: it checks the ones collected")
    table = measured()
    missing = [
        item.nodeid
        for item in kata_tests
        if item.get_closest_marker("kata_cuda") is None and cost_of(table_key(item.path, item.nodeid), table) is None
    ]
    assert not missing, (
        f"{len(missing)} kata test(s) have no cost in tests/costs.json, so they run last in their tier, "
        f"e.g. {missing[:3]}: measure them with `python grader.py costs` (on an idle machine)"
    )


def test_a_test_key_is_the_file_under_tests_and_the_name_there():
    assert table_key(TESTS / "causal_lm" / "test_forward.py", "x/y/test_forward.py::test_a[cpu]") == (
        "causal_lm/test_forward.py::test_a[cpu]"
    )
    assert costs.COSTS == Path(TESTS / "costs.json")

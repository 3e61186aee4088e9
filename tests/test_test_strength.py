"""The tests' own strength, judged through the real grader pipeline.

- every mutant (a realistic wrong implementation, tests/mutants/<kata>/<slip>.py) is graded "fail"
  (or "forbidden", for one that calls what the kata forbids);
- every variant (a correct implementation in another style, tests/variants/<kata>/<style>.py)
  is graded "pass";
- every stub generated from solutions/ is graded "todo", and katas/ as committed is that stub.
"""

from pathlib import Path

import pytest

from judge.catalog import kata_names, load_catalog
from judge.limits import Limits
from judge.paths import ROOT
from judge.scheduling import Job, default_workers, grade_all
from judge.stubs import committed_text, make_stub

CATALOG = kata_names(load_catalog())
MUTANTS = sorted((ROOT / "tests" / "mutants").glob("*/*.py"))
VARIANTS = sorted((ROOT / "tests" / "variants").glob("*/*.py"))
MIN_MUTANTS = 5


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.fixture(scope="module")
def verdicts(request) -> dict:
    """Grade the selected mutants and variants (all, unless -k narrows them) once, in parallel."""
    paths = [
        item.callspec.params["path"]
        for item in request.session.items
        if hasattr(item, "callspec") and "path" in item.callspec.params
    ]
    jobs = [Job(path.parent.name, path) for path in paths]
    results = grade_all(
        jobs,
        seed=request.config.kata_seed,
        device=request.config.getoption("device"),
        limits=Limits(time_limit=120, test_timeout=60),
        workers=default_workers(),
        fork=True,  # warm forked children: the same tests and verdicts, a third of the time
    )
    return dict(zip(paths, results))


def test_every_mutant_and_variant_names_a_kata():
    strays = [case_id(p) for p in MUTANTS + VARIANTS if p.parent.name not in CATALOG]
    assert not strays, f"not in info.toml: {strays}"


@pytest.mark.parametrize("kata", CATALOG)
def test_kata_has_enough_mutants(kata):
    count = sum(p.parent.name == kata for p in MUTANTS)
    assert count >= MIN_MUTANTS, f"{kata} has {count} mutants under tests/mutants/{kata}/; keep at least {MIN_MUTANTS}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", MUTANTS, ids=case_id)
def test_mutant_is_rejected(path, verdicts):
    verdict = verdicts[path]
    rejected = ("fail", "forbidden")  # forbidden: a mutant that calls what its kata forbids
    assert verdict.status in rejected, f"mutant {case_id(path)} was graded {verdict.status!r}, not {rejected}: " + (
        "it survived, so a test is missing" if verdict.status == "pass" else verdict.message
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", VARIANTS, ids=case_id)
def test_variant_passes(path, verdicts):
    verdict = verdicts[path]
    assert verdict.status == "pass", (
        f"correct variant {case_id(path)} was graded {verdict.status!r}: "
        f"a test is too strict or wrong. {verdict.message}"
    )


@pytest.mark.timeout(300)
def test_generated_stubs_are_graded_todo(tmp_path, request):
    for name in CATALOG:
        solution = (ROOT / "solutions" / f"{name}.py").read_text(encoding="utf-8")
        (tmp_path / f"{name}.py").write_text(make_stub(solution), encoding="utf-8")
    jobs = [Job(name, tmp_path / f"{name}.py") for name in CATALOG]
    results = grade_all(
        jobs,
        seed=request.config.kata_seed,
        device="cpu",
        limits=Limits(time_limit=120, test_timeout=60),
        workers=default_workers(),
        fork=False,
    )
    wrong = {r.name: f"{r.status}: {r.message}" for r in results if r.status != "todo"}
    assert not wrong, f"untouched stubs must be graded 'todo': {wrong}"


@pytest.mark.parametrize("kata", CATALOG)
def test_committed_stub_is_generated_from_the_solution(kata):
    committed = committed_text(ROOT / "katas" / f"{kata}.py")
    if committed is None:
        pytest.skip("not in a git checkout with katas/ committed")
    expected = make_stub((ROOT / "solutions" / f"{kata}.py").read_text(encoding="utf-8"))
    assert committed == expected, (
        f"katas/{kata}.py as committed differs from the stub generated from "
        f"solutions/{kata}.py; maintainers: run `make stubs` and commit"
    )

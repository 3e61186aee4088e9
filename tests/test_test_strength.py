"""The tests' own strength, judged through the real grader pipeline.

- every mutant (a realistic slip, kept as a patch in tests/mutants/<kata>.toml, applied to
  the current solution) still applies, and is graded as it expects: "fail", or "forbidden"
  for one that calls what the kata forbids; and not by an error that says the patch is
  stale (NameError, ImportError, a call that no longer binds), which is no proof at all;
  and its failure is diagnosed as its own slip ("looks like: <its why>"); graded in Chinese,
  its verdict has no English prose left (what every slip brings out has its Chinese twin);
- every variant (a correct implementation in another style, tests/variants/<kata>/<style>.py)
  is graded "pass";
- every stub generated from solutions/ is graded "todo", and katas/ as committed is that stub.
"""

import atexit
import difflib
import shutil
import tempfile
from pathlib import Path

import pytest
from english_words import english_prose
from pool import Batch
from pool import verdict as graded

from judge.catalog import kata_names, load_catalog
from judge.limits import Limits
from judge.mutants import MutantError, all_mutants, load_mutants
from judge.paths import MUTANTS, SOLUTIONS, VARIANTS
from judge.protocol import is_stale_failure
from judge.reporting import shown_diagnosis
from judge.scheduling import Job
from judge.stubs import committed_text, make_stub

CATALOG = kata_names(load_catalog())
MUTANT_LIST = all_mutants(CATALOG)
VARIANT_FILES = sorted(VARIANTS.glob("*/*.py"))
MIN_MUTANTS = 5
LIMITS = Limits(time_limit=120, test_timeout=60)
# Slips that show only at some sizes: graded under more seeds, each of which must reject them.
SIZE_SENSITIVE = ["positional_encoding/angles_in_half_precision"]
EXTRA_SEEDS = 3


def variant_id(path) -> str:
    return f"{path.parent.name}/{path.stem}"


def mutant_files(folder: Path) -> dict:
    """Each mutant's text (its patch applied to the current solution) as a kata file in
    `folder`, or the MutantError that says its patch no longer applies."""
    files = {}
    for mutant in MUTANT_LIST:
        path = folder / mutant.kata / f"{mutant.name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_text(mutant.source(), encoding="utf-8")
        except MutantError as error:
            files[mutant.id] = error
        else:
            files[mutant.id] = path
    return files


FILES: dict = {}  # mutant id -> its file, or the MutantError of a stale patch (made by grading_plan)


def grading_plan(items, config) -> list[Batch]:
    """The grades the selected tests read (tests/pool.py): mutants up to their first failed
    test (enough to reject one), variants and stubs in full, the size-sensitive mutants under
    more seeds."""
    folder = Path(tempfile.mkdtemp(prefix="katas-strength-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    FILES.update(mutant_files(folder / "mutants"))
    chosen = [item.callspec.params if hasattr(item, "callspec") else {} for item in items]
    jobs = {
        m.id: Job(m.kata, FILES[m.id], first_failure=True)
        for p in chosen
        if (m := p.get("mutant")) and not isinstance(FILES[m.id], MutantError)
    }
    jobs |= {variant_id(v): Job(v.parent.name, v) for p in chosen if (v := p.get("variant"))}
    if any(item.originalname == "test_generated_stubs_are_graded_todo" for item in items):
        (folder / "stubs").mkdir()
        for name in CATALOG:
            solution = (SOLUTIONS / f"{name}.py").read_text(encoding="utf-8")
            (folder / "stubs" / f"{name}.py").write_text(make_stub(solution), encoding="utf-8")
            jobs[f"stub/{name}"] = Job(name, folder / "stubs" / f"{name}.py")
    # each kata's grades in a row (its mutants, variants, stub): a fork server keeps a template
    # for the last two katas only (judge/templates.py), and made one per kata and kind of file;
    # the catalog's last katas first (the systems katas' worlds, the capstones' training: the
    # longest grades), so the short ones fill both cores at the end
    first = {kata: -index for index, kata in enumerate(CATALOG)}
    jobs = dict(sorted(jobs.items(), key=lambda item: first[item[1].name]))
    batches = [Batch("strength", jobs, LIMITS, config.kata_seed, env={"KATAS_LANG": "zh"})]
    sizes = [p["mutant_id"] for p in chosen if "mutant_id" in p]
    for n in range(1, EXTRA_SEEDS + 1):
        extra = {mutant_id: Job(mutant_id.split("/")[0], FILES[mutant_id], first_failure=True) for mutant_id in sizes}
        batches.append(Batch(f"strength, seed +{n}", extra, LIMITS, config.kata_seed + n))
    return batches


def test_every_variant_names_a_kata():
    strays = [variant_id(p) for p in VARIANT_FILES if p.parent.name not in CATALOG]
    assert not strays, f"not in info.toml: {strays}"


def test_every_mutant_file_names_a_kata():
    strays = [p.name for p in MUTANTS.glob("*.toml") if p.stem not in CATALOG]
    strays += [p.name for p in MUTANTS.iterdir() if p.is_dir() and p.name not in CATALOG]
    assert not strays, f"not in info.toml: {strays}"


@pytest.mark.parametrize("kata", CATALOG)
def test_kata_has_enough_mutants_and_a_variant(kata):
    count = len(load_mutants(kata))
    assert count >= MIN_MUTANTS, f"{kata} has {count} mutants in tests/mutants/{kata}.toml; keep at least {MIN_MUTANTS}"
    assert (VARIANTS / kata).is_dir() and any((VARIANTS / kata).glob("*.py")), f"{kata} has no variant"


@pytest.mark.parametrize("mutant", [m for m in MUTANT_LIST if m.file], ids=lambda m: m.id)
def test_a_whole_file_mutant_is_a_rewrite(mutant):
    """A slip that is a small edit is kept as a patch, so it follows the solution as it changes."""
    solution = (SOLUTIONS / f"{mutant.kata}.py").read_text().splitlines()
    changed = sum(1 for line in difflib.ndiff(solution, mutant.source().splitlines()) if line[:1] in "+-")
    assert changed >= 30, f"{mutant.id} changes {changed} lines of the solution: keep it as [[mutant.edit]] entries"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant", MUTANT_LIST, ids=lambda m: m.id)
def test_mutant_is_rejected(mutant):
    if isinstance(FILES[mutant.id], MutantError):
        raise AssertionError(str(FILES[mutant.id]))
    verdict = graded("strength", mutant.id)
    assert verdict.status == mutant.expect, (
        f"mutant {mutant.id} was graded {verdict.status!r}, not {mutant.expect!r}: "
        + ("it survived, so a test is missing" if verdict.status == "pass" else verdict.message)
    )
    if verdict.status == "fail":
        assert not all(is_stale_failure(f) for f in verdict.failures), (
            f"stale mutant {mutant.id}: it fails only with {verdict.failures[0]['error']}, not by its slip; "
            f"update its patch in tests/mutants/{mutant.kata}.toml: {verdict.message}"
        )
        assert any(mutant.why_zh in line for line in verdict.diagnosis), (
            f"mutant {mutant.id} was not recognised as its own slip ({mutant.why}): its diagnosis is {verdict.diagnosis}; "
            f"its first failure: {verdict.message}"
        )
        if mutant.tier is not None:  # core tests run first: the first failure's tier is the slip's
            assert verdict.failures[0].get("tier") == mutant.tier, (
                f"mutant {mutant.id} is declared {mutant.tier!r} but was first rejected by a "
                f"{verdict.failures[0].get('tier')!r} test: {verdict.failures[0]['name']}: {verdict.message}"
            )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant", MUTANT_LIST, ids=lambda m: m.id)
def test_a_mutants_verdict_is_all_chinese(mutant, monkeypatch):
    """Graded under KATAS_LANG=zh: the message, the failing test, its case and the diagnosis
    are Chinese but for code, names and numbers (tests/english_words.py)."""
    if isinstance(FILES[mutant.id], MutantError):
        pytest.skip("a stale patch: test_mutant_is_rejected reports it")
    verdict = graded("strength", mutant.id)
    monkeypatch.setenv("KATAS_LANG", "zh")
    shown = [shown_diagnosis(line) for line in verdict.diagnosis]  # as the table shows it: its marker in Chinese
    texts = [verdict.message, *shown, *(f"{f['name']}: {f.get('message', '')}" for f in verdict.failures)]
    english = {text: found for text in texts if (found := english_prose(text))}
    assert not english, f"mutant {mutant.id}: English left in its Chinese verdict: {english}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("variant", VARIANT_FILES, ids=variant_id)
def test_variant_passes(variant):
    verdict = graded("strength", variant_id(variant))
    assert verdict.status == "pass", (
        f"correct variant {variant_id(variant)} was graded {verdict.status!r}: a test is too strict or wrong. {verdict.message}"
    )
    assert verdict.diagnosis == [], f"a passing kata has no diagnosis: {verdict.diagnosis}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant_id", SIZE_SENSITIVE)
def test_a_size_sensitive_mutant_is_rejected_under_every_seed(mutant_id, request):
    """Random shapes alone let these through on some seeds; the named edge cases must not."""
    for n in range(1, EXTRA_SEEDS + 1):
        verdict = graded(f"strength, seed +{n}", mutant_id)
        assert verdict.status == "fail", f"{mutant_id} survived seed {request.config.kata_seed + n}: {verdict.message}"


@pytest.mark.timeout(900)
def test_generated_stubs_are_graded_todo():
    results = [graded("strength", f"stub/{name}") for name in CATALOG]
    wrong = {r.name: f"{r.status}: {r.message} {r.diagnosis}" for r in results if r.status != "todo" or r.diagnosis}
    assert not wrong, f"untouched stubs must be graded 'todo': {wrong}"


@pytest.mark.parametrize("kata", CATALOG)
def test_committed_stub_is_generated_from_the_solution(kata):
    committed = committed_text(SOLUTIONS.parent / "katas" / f"{kata}.py")
    if committed is None:
        pytest.skip("not in a git checkout with katas/ committed")
    expected = make_stub((SOLUTIONS / f"{kata}.py").read_text(encoding="utf-8"))
    assert committed == expected, (
        f"katas/{kata}.py as committed differs from the stub generated from "
        f"solutions/{kata}.py; maintainers: run `make stubs` and commit"
    )

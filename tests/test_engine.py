"""The engine's own rules: its structure, the stub generator, the catalog, the mutant patches,
and the case tables every kata spec declares."""

import ast
import importlib
import importlib.util
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from english_words import english_prose

from judge.catalog import CatalogError, kata_names, load_catalog
from judge.mutants import MutantError, load_mutants
from judge.paths import ROOT, SOLUTIONS, spec_module
from judge.paths import test_file as where_tests_are  # not collected as a test
from judge.stubs import StubError, make_stub
from judge.testing.attention import SCALE_FACTORS, relative_scale
from judge.testing.tiers import MARKER, TIERS
from judge.warm import imported_from_installed

CATALOG = kata_names(load_catalog())
PROJECT = [*sorted((ROOT / "judge").rglob("*.py")), ROOT / "grader.py", ROOT / "practice.py"]


# --------------------------------------------------------------------------- structure


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path) -> set[str]:
    """The project modules `path` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    known = {module_name(p) for p in PROJECT}
    return {name for name in found if name in known}


GRAPH = {module_name(path): imports_of(path) - {module_name(path)} for path in PROJECT}


def test_no_import_cycle_among_the_project_modules():
    """Tarjan's strongly connected components: every one must be a single module."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in GRAPH.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles: {cycles}"


def test_the_engine_never_imports_the_commands():
    """Dependencies point one way: entry points -> practice commands -> engine."""
    commands = {"grader", "practice"}
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if target in commands
        or (target.startswith("judge.practice") and not module.startswith(("judge.practice", "practice")))
    ]
    assert not wrong, wrong


def test_the_entry_points_are_thin():
    for name in ("grader.py", "practice.py"):
        lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) <= 40, f"{name} has {len(lines)} lines: its work belongs in judge/"


def test_the_command_line_does_not_import_torch():
    """`make grade` answers bad input at once: torch is imported only in kata processes."""
    code = "import sys, judge.grading, judge.practice.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# --------------------------------------------------------------------------- stubs


def test_stub_generation_keeps_todo_lines_and_raises():
    solution = (
        'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    # TODO: double it.\n'
        "    y = 2 * x  # secret\n    return y\n    ### END SOLUTION\n"
    )
    assert make_stub(solution) == 'def f(x):\n    """Doc."""\n    # TODO: double it.\n    raise NotImplementedError\n'


@pytest.mark.parametrize(
    "solution, words",
    [
        (
            "### BEGIN SOLUTION\nx = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\n",
            "inside the region opened on line 1",
        ),
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", "line 2: BEGIN SOLUTION is never closed"),
        ("x = 1\n### END SOLUTION\n", "line 2: END SOLUTION without a BEGIN SOLUTION"),
    ],
    ids=["nested", "unterminated", "unopened"],
)
def test_a_malformed_region_is_refused(solution, words):
    with pytest.raises(StubError, match=words):
        make_stub(solution)


@pytest.mark.parametrize("kata", CATALOG)
def test_every_solution_has_well_formed_regions(kata):
    stub = make_stub((SOLUTIONS / f"{kata}.py").read_text(encoding="utf-8"))
    assert "raise NotImplementedError" in stub


# --------------------------------------------------------------------------- catalog


GOOD = 'name = "causal_mask"\ntitle = "t"\ndifficulty = 1\nminutes = 5\nreference = "r"\nhints = ["h"]\n'


@pytest.mark.parametrize(
    "entry, words",
    [
        (GOOD.replace('"causal_mask"', '"no_such_kata"'), "no solutions/no_such_kata.py"),
        (GOOD.replace("difficulty = 1", "difficulty = 9"), "difficulty must be 1 to 5"),
        (GOOD.replace("minutes = 5\n", ""), "missing field 'minutes'"),
        (GOOD + "colour = 1\n", "unknown field 'colour'"),
        (GOOD.replace('hints = ["h"]', 'hints = [""]'), "hints must be non-empty strings"),
        (GOOD.replace("minutes = 5", 'minutes = "5"'), "minutes must be a int"),
    ],
    ids=["no solution", "difficulty", "missing", "unknown", "empty hint", "type"],
)
def test_the_catalog_refuses_a_broken_entry(tmp_path, entry, words):
    info = tmp_path / "info.toml"
    info.write_text("[[kata]]\n" + entry, encoding="utf-8")
    with pytest.raises(CatalogError, match=words):
        load_catalog(info)


def test_the_catalog_refuses_a_kata_listed_twice(tmp_path):
    info = tmp_path / "info.toml"
    info.write_text(f"[[kata]]\n{GOOD}\n[[kata]]\n{GOOD}", encoding="utf-8")
    with pytest.raises(CatalogError, match="listed twice"):
        load_catalog(info)


# --------------------------------------------------------------------------- mutants


def write_mutants(tmp_path, text: str):
    (tmp_path / "causal_mask.toml").write_text(text, encoding="utf-8")
    return load_mutants("causal_mask", tmp_path)


def test_a_patch_that_no_longer_applies_fails_loudly(tmp_path):
    [gone, twice] = write_mutants(
        tmp_path,
        '[[mutant]]\nname = "gone"\nwhy = "W."\ntier = "core"\n[[mutant.edit]]\nfind = "no such text"\nreplace = "x"\n'
        '[[mutant]]\nname = "twice"\nwhy = "W."\ntier = "core"\n[[mutant.edit]]\nfind = "seq_len"\nreplace = "n"\n',
    )
    with pytest.raises(MutantError, match="is not in solutions/causal_mask.py"):
        gone.source()
    with pytest.raises(MutantError, match="occurs [0-9]+ times"):
        twice.source()


def test_a_patch_that_breaks_the_syntax_fails_loudly(tmp_path):
    [broken] = write_mutants(
        tmp_path,
        '[[mutant]]\nname = "broken"\nwhy = "W."\ntier = "core"\n[[mutant.edit]]\nfind = "diagonal=1)"\nreplace = "diagonal=1"\n',
    )
    with pytest.raises(MutantError, match="does not parse"):
        broken.source()


@pytest.mark.parametrize(
    "text, words",
    [
        ('[[mutant]]\nname = "a"\nwhy = "W."\n', "either"),
        ('[[mutant]]\nname = "a b"\nwhy = "W."\nfile = "x.py"\n', "identifier"),
        ('[[mutant]]\nname = "a"\nfile = "x.py"\n', "why must say"),
        ('[[mutant]]\nname = "a"\nwhy = "W."\nexpect = "pass"\nfile = "x.py"\n', "expect must be one of"),
        ('[[mutant]]\nname = "a"\nwhy = "W."\nfile = "x.py"\ncolour = 1\n', "unknown field"),
        ('[[mutant]]\nname = "a"\nwhy = "W."\nfile = "x.py"\n', "tier must be one of"),
    ],
    ids=["no edit", "name", "no why", "expect", "unknown", "no tier"],
)
def test_a_malformed_mutant_entry_is_refused(tmp_path, text, words):
    with pytest.raises(MutantError, match=words):
        write_mutants(tmp_path, text)


@pytest.mark.parametrize("kata", CATALOG)
def test_every_mutant_says_what_the_slip_is(kata):
    for mutant in load_mutants(kata):
        assert mutant.why.endswith(".") and "\n" not in mutant.why, (
            f"{mutant.id}: why is a sentence or two, on one line: {mutant.why!r}"
        )


# --------------------------------------------------------------------------- specs and case tables


def spec_of(kata: str):
    return importlib.import_module(spec_module(kata)).SPEC


@pytest.mark.parametrize("kata", CATALOG)
def test_every_kata_declares_a_spec_with_named_edge_cases(kata):
    spec = spec_of(kata)
    assert (spec.kata, spec.benchmark is not None) == (kata, True)
    assert spec.cases is not None and len(spec.cases.edges) >= 3, f"{kata}: name the edge cases that run every time"
    for seed in range(5):  # the edge cases run whatever the seed, before the random draws
        cases = spec.cases.cases(random.Random(seed))
        assert cases[: len(spec.cases.edges)] == list(spec.cases.edges)
        assert len(cases) > len(spec.cases.edges)


@pytest.mark.parametrize("kata", CATALOG)
def test_every_named_case_reads_in_chinese_without_english_prose(kata, monkeypatch):
    """A failure at a case names it: its Chinese description, and its sizes as code (a value
    given in words, kind="draft equals target", is quoted: judge.testing.spec). Every named
    case, not only those a slip happens to fail first under the run's seed."""
    monkeypatch.setenv("KATAS_LANG", "zh")
    english = {str(case): found for case in spec_of(kata).cases.edges if (found := english_prose(str(case)))}
    assert not english, f"{kata}: English prose in named cases shown in Chinese: {english}"


def kata_tests(kata: str) -> dict:
    """{test name: the test function} of the kata's test module(s)."""
    where = where_tests_are(kata)
    names = [f"{kata}.{p.stem}" for p in sorted(where.glob("test_*.py"))] if where.is_dir() else [where.stem]
    found = {}
    for name in names:
        module = importlib.import_module(name)
        found |= {f"{name}.{k}": v for k, v in vars(module).items() if k.startswith("test_") and callable(v)}
    return found


def docstring_lines(kata: str) -> str:
    """Every docstring of the kata's solution (module, classes, functions), whitespace made single spaces."""
    tree = ast.parse((SOLUTIONS / f"{kata}.py").read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
    return " ".join(" ".join((ast.get_docstring(n) or "").split()) for n in nodes)


def quoted(stub_says: str, docstrings: str) -> bool:
    """Whether the docstrings say `stub_says` ("..." standing for any text)."""
    pattern = ".*?".join(re.escape(part.strip()) for part in stub_says.split("..."))
    return re.search(pattern, docstrings) is not None


@pytest.mark.parametrize("kata", CATALOG)
def test_every_kata_test_declares_its_tier_and_each_convention_quotes_the_stub(kata):
    docstrings = docstring_lines(kata)
    for name, test in kata_tests(kata).items():
        marks = [m for m in getattr(test, "pytestmark", []) if m.name == MARKER]
        assert len(marks) == 1 and marks[0].args[0] in TIERS, f"{name}: declare its tier once (@core or @convention)"
        stub_says = marks[0].kwargs.get("stub_says")
        if stub_says is not None:
            assert quoted(stub_says, docstrings), f"{name}: the stub of {kata} does not say {stub_says!r}"


def test_positional_encoding_runs_past_the_exact_integers_of_half_precision_every_time():
    """Hole 5: positions made in a half dtype go wrong only past 256 (bfloat16) and 2048 (float16)."""
    positions = [case["P"] for case in spec_of("positional_encoding").cases.edges]
    assert max(positions) > 2048 and any(256 < p <= 2048 for p in positions)


@pytest.mark.parametrize("E", [1, 2, 3, 7, 16, 64, 128, 512])
def test_custom_scales_keep_the_softmax_neither_saturated_nor_flat(E):
    """Hole 6: scales relative to 1/sqrt(E) keep the scores' spread in [0.4, 2.2] at every
    head size, never near 1 (a kata ignoring `scale` must differ)."""
    rng = random.Random(E)
    for _ in range(20):
        spread = relative_scale(rng, E) * math.sqrt(E)
        assert 0.4 - 1e-4 <= spread <= 2.2 + 1e-4 and abs(spread - 1) > 0.3, (E, spread)
    assert min(SCALE_FACTORS) >= 0.4 and max(SCALE_FACTORS) <= 2.2


def test_a_kata_that_declares_longer_limits_gets_them_and_no_other_does():
    """A training kata's tests may need more than the default 20 s: info.toml's test_timeout.
    (A catalog of its own, passed in: the suite's pool reads info.toml's meanwhile.)"""
    from judge import catalog
    from judge.limits import DEFAULT, declared_limits, limits_for

    trains = catalog.Kata("trains", "t", 3, 30, "r", ["a", "b", "c"], test_timeout=45, time_limit=120)
    declared = declared_limits([trains, catalog.Kata("other", "o", 1, 10, "r", ["a"])])
    assert declared == {"trains": (120, 45)}
    raised = limits_for("trains", DEFAULT, declared)
    assert (raised.test_timeout, raised.time_limit) == (45, 120)
    assert limits_for("other", DEFAULT, declared) == DEFAULT
    generous = DEFAULT.at_least(test_timeout=100)
    assert limits_for("trains", generous, declared).test_timeout == 100  # never lowered


def test_the_sandbox_probe_names_every_wall_and_why_one_is_down():
    """`python -m judge.sandbox` (the README's guarantees, checked on this machine)."""
    from judge.sandbox import WHAT_EACH_WALL_GUARANTEES, probe

    found = probe()
    assert set(found) == set(WHAT_EACH_WALL_GUARANTEES), found
    assert all(state == "up" or state.strip() for state in found.values()), found


@pytest.mark.skipif(sys.prefix != str(ROOT / ".venv"), reason="checks the .venv that make setup creates")
def test_set_up_compiled_every_installed_module_grading_has_imported():
    """make setup installs without compiling, then compiles what grading imports (judge.warm):
    a module it missed is compiled from source by every process that imports it (grading
    processes write no bytecode). By now this process has imported what the kata tests do."""
    missed = sorted(
        str(source)
        for source in imported_from_installed()
        if not Path(importlib.util.cache_from_source(str(source))).exists()
    )
    assert not missed, f"not compiled at set-up (add their package to judge.warm.IMPORTED_LATER): {missed}"

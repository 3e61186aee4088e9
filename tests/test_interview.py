"""Interview mode: a bare stub (the signatures and a few lines of task, judge.bare) graded on
the math alone (judge.interview), the conventions listed after the verdict; info.toml's task
texts kept in step with the stubs."""

import ast
import re

import pytest

from judge.bare import bare_stub
from judge.catalog import load_catalog
from judge.interview import conventions_note, core_only
from judge.protocol import KataResult, Outcome, Status, TestReport
from judge.stubs import stub_text
from judge.verdicts import tier_counts

CATALOG = load_catalog()
TICKED = re.compile(r"`([A-Za-z_][A-Za-z_0-9.]*)")


def graded(status, core, conventions, failures=()) -> KataResult:
    tiers = {
        "core": {"passed": core[0], "total": core[1]},
        "conventions": {"passed": conventions[0], "total": conventions[1]},
    }
    passed, total = core[0] + conventions[0], core[1] + conventions[1]
    return KataResult("multi_head_attention", status, passed / total, passed, total, "m", list(failures), tiers=tiers)


MISSED_HALF = {"name": "works in half precision [float16]", "tier": "conventions", "message": "..."}
WRONG_SCALE = {"name": "matches nn.MultiheadAttention [float32]", "tier": "core", "message": "wrong output"}


def test_a_file_whose_math_is_right_passes_the_interview_whatever_its_conventions():
    result = core_only(graded(Status.FAIL, (10, 10), (3, 5), [MISSED_HALF]))
    assert (result.status, result.score, result.passed, result.total) == (Status.PASS, 1.0, 10, 10)
    assert result.message == "the math is right: 10/10 core tests pass" and not result.failures


def test_a_file_whose_math_is_wrong_fails_it_on_the_core_tests_alone():
    result = core_only(graded(Status.FAIL, (4, 10), (2, 5), [WRONG_SCALE, MISSED_HALF]))
    assert (result.status, result.passed, result.total) == (Status.FAIL, 4, 10) and result.score == 0.4
    assert result.failures == [WRONG_SCALE]


@pytest.mark.parametrize("status", [Status.TODO, Status.ERROR, Status.TIMEOUT, Status.FORBIDDEN])
def test_other_verdicts_stand(status):
    result = graded(status, (0, 10), (0, 5))
    assert core_only(result) is result


def test_after_the_verdict_the_conventions_are_listed_with_their_results():
    result = graded(Status.FAIL, (10, 10), (4, 5), [MISSED_HALF])
    result.tiers["conventions"]["titles"] = {"works in half precision": False, "leaves its inputs alone": True}
    note = conventions_note(result)
    assert note[0].startswith("a production version would add (not counted in an interview; 4 of 5")
    assert note[1:] == ["  ✗ works in half precision", "  ✓ leaves its inputs alone"]


def test_a_verdict_counts_each_tests_runs_under_its_title():
    tests = {"a[float32]": "leaves its inputs alone [float32]", "a[float64]": "leaves its inputs alone [float64]"}
    tests |= {"b": "matches the reference"}
    reports = {
        "a[float32]": TestReport("a[float32]", "", Outcome.PASSED),
        "a[float64]": TestReport("a[float64]", "", Outcome.FAILED),
        "b": TestReport("b", "", Outcome.PASSED),
    }
    counts = tier_counts(tests, {"a[float32]": "conventions", "a[float64]": "conventions", "b": "core"}, reports)
    assert counts["conventions"] == {"passed": 1, "total": 2, "titles": {"leaves its inputs alone": False}}
    assert counts["core"] == {"passed": 1, "total": 1, "titles": {"matches the reference": True}}


@pytest.mark.parametrize("kata", CATALOG, ids=lambda k: k.name)
def test_each_kata_has_a_bare_task_in_both_languages_in_step_with_its_stub(kata):
    """At most 3 lines of task, then its shapes, 5 lines at most; the same code names in both
    languages, each one the stub itself uses (a name the stub renames fails here)."""
    assert kata.interview and kata.interview_zh, f"{kata.name}: info.toml needs interview and interview_zh"
    lines = kata.interview.strip().splitlines()
    task = [line for line in lines if not line.startswith("Shapes:")]
    assert len(lines) <= 5 and len(task) <= 3 and lines[-1].startswith("Shapes:"), lines
    assert all(len(line) <= 100 for line in lines)
    assert len(kata.interview_zh.strip().splitlines()) == len(lines)
    named = TICKED.findall(kata.interview)
    assert sorted(named) == sorted(TICKED.findall(kata.interview_zh))
    used = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", stub_text(kata.name))) | {"nn", "F", "torch"}
    assert not [name for name in named if name.split(".")[0] not in used], kata.name
    bare = bare_stub(stub_text(kata.name), kata.interview, title=kata.title)
    assert kata.interview.strip() in ast.get_docstring(ast.parse(bare))


@pytest.mark.parametrize("kata", CATALOG, ids=lambda k: k.name)
def test_a_bare_stub_is_the_signatures_and_the_task_only(kata):
    stub = stub_text(kata.name)
    bare = bare_stub(stub, "Do the thing.\nShapes: x [N] -> [N]", title=kata.title)
    tree = ast.parse(bare)
    assert ast.get_docstring(tree).endswith("Do the thing.\nShapes: x [N] -> [N]")
    assert "TODO" not in bare and "Conventions" not in bare and "Example" not in bare
    public = {node.name for node in ast.parse(stub).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))} - {
        name for name in dir() if name.startswith("_")
    }
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert defined == {name for name in public if not name.startswith("_")}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert [type(s) for s in node.body] == [ast.Raise], (kata.name, node.name)

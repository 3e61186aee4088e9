"""Grades forked from a template that has collected the kata's tests (judge.templates): a copy
takes exactly the options its flags would have given, no grade's output reaches the next,
and a template that is gone or never collected costs a grade nothing but the usual start.
Every verdict of the suite's pool (mutants, variants, stubs, broken files) comes through
templates too, in the fork engine's lanes."""

import json
import textwrap

import pytest
from _pytest.config import get_config
from scripts import run_script

from judge.engines import grade_options, pytest_args, template_args
from judge.limits import Limits
from judge.paths import ROOT
from judge.templates import Template


def parsed(args: list[str]) -> dict:
    """pytest's option values for these arguments, as a judging process would have them."""
    config = get_config(args)
    config.parse(args)
    return vars(config.option)


@pytest.mark.parametrize("first_failure", [False, True])
def test_a_copy_of_the_template_has_the_options_of_a_grade_started_afresh(tmp_path, first_failure):
    """What a copy sets (grade_options) over what its template parsed (template_args) is all
    that the flags of a grade started afresh (pytest_args) change."""
    kata, limits = tmp_path / "causal_mask.py", Limits(memory_mb=1234, output_mb=7)
    own = {"seed": 11, "results": tmp_path / "results.jsonl", "limits": limits, "first_failure": first_failure}
    afresh = parsed(pytest_args("causal_mask", kata, device="cpu", **own))
    copied = parsed(template_args("causal_mask", "cpu")) | grade_options(kata, **own)
    assert copied == afresh


def test_a_template_that_cannot_collect_starts_no_grade(tmp_path):
    """pytest refuses the template's arguments: it ends before its first grade, which is then
    left to the usual start (the engine's fallback) instead of waiting."""
    template = Template([*template_args("causal_mask", "cpu"), "--no-such-option"], cwd=ROOT, env={})
    try:
        options = grade_options(tmp_path / "causal_mask.py", seed=1, results=tmp_path / "r.jsonl", limits=Limits())
        assert template.grade(options, cwd=ROOT, env={}, log_path=tmp_path / "log") is None
    finally:
        template.close()


PRINTS_THEN_HANGS = """
import torch

calls = 0


def causal_mask(seq_len, *, device=None):
    global calls
    calls += 1
    if calls > 1:
        while True:
            pass
    print("MARKER OF THE FIRST GRADE")
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
"""

PRINTS_AND_PASSES = """
import torch


def causal_mask(seq_len, *, device=None):
    print("the second grade")
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)
"""

GRADES = textwrap.dedent("""
    import json, os, signal, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from judge.engines import ForkEngine
    from judge.limits import Limits
    tempfile.tempdir = sys.argv[4]  # what this process and its forks make: an empty folder's
    engine, out = ForkEngine(device="cpu"), {}

    def grade(label, kata, path, test_timeout):
        engine.limits = Limits(test_timeout=test_timeout)
        result = engine.grade(kata, Path(path), 5)
        out[label] = [str(result.status), result.message, result.printed]

    solution = str(Path(sys.argv[1]) / "solutions" / "causal_mask.py")
    grade("first", "causal_mask", sys.argv[2], 1)
    grade("second", "causal_mask", sys.argv[3], 20)
    [template] = engine.templates.values()
    os.kill(template.pid, signal.SIGKILL)
    os.waitpid(template.pid, 0)
    grade("after the template was killed", "causal_mask", solution, 20)
    out["templates"] = [t.pid for t in engine.templates.values()]
    out["killed"], out["refused"] = template.pid, len(engine.untemplated)
    out["left behind"] = os.listdir(sys.argv[4])
    print(json.dumps(out))
""")


def test_grades_from_one_template_share_nothing_and_a_killed_template_is_replaced(tmp_path):
    """Two grades of causal_mask in a row from the same template: the first prints, then hangs
    in the same test until it is stopped (what it printed was in pytest's capture file when it
    was killed); the second prints and passes, and shows only its own print. Then the template
    is killed, and the next grade is still judged, by a new one. No grade leaves a temporary
    folder behind (theirs and their kata processes' are in the grade's own folder)."""
    first, second = tmp_path / "first" / "causal_mask.py", tmp_path / "second" / "causal_mask.py"
    for path, text in ((first, PRINTS_THEN_HANGS), (second, PRINTS_AND_PASSES)):
        path.parent.mkdir()
        path.write_text(text)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out = run_script(GRADES, str(first), str(second), str(temporary))
    assert out["first"][0] == "timeout", out["first"]
    status, _, printed = out["second"]
    assert status == "pass" and "the second grade" in printed, out["second"]
    assert "MARKER" not in json.dumps(out["second"]), out["second"]
    assert out["after the template was killed"][0] == "pass", out["after the template was killed"]
    assert len(out["templates"]) == 1 and out["templates"][0] != out["killed"] and out["refused"] == 0, out
    assert out["left behind"] == [], out["left behind"]

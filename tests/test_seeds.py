"""The seed-stability check (`python -m judge.seeds`) says exactly which verdicts are wrong."""

from pathlib import Path

import pytest

from judge.mutants import Mutant
from judge.protocol import KataResult, Status
from judge.seeds import Subject, main, wrong

SLIP = Mutant("softmax", "max_not_subtracted", why="The max is not subtracted.", tier="core")
MUTANT = Subject("softmax", "mutant max_not_subtracted", Path("m.py"), SLIP)
CORRECT = Subject("softmax", "variant online", Path("v.py"))


def verdict(status: Status, *, diagnosis=(), tier="core") -> KataResult:
    failures = [{"name": "matches torch.softmax", "tier": tier, "message": "off"}] if status == Status.FAIL else []
    return KataResult("softmax", status, 0.0, 0, 3, "1 of 3 tests failed", failures, diagnosis=list(diagnosis))


def test_a_mutant_rejected_by_its_tier_and_named_is_right():
    assert wrong(MUTANT, verdict(Status.FAIL, diagnosis=["looks like: The max is not subtracted."])) is None


@pytest.mark.parametrize(
    "graded, words",
    [
        (verdict(Status.PASS), "graded pass, not fail"),
        (verdict(Status.FAIL, diagnosis=["looks like: another slip"]), "not diagnosed as its own slip"),
        (verdict(Status.FAIL, diagnosis=["looks like: The max is not subtracted."], tier="conventions"), "not a core one"),
    ],
)
def test_a_mutant_that_survives_or_is_misnamed_is_wrong(graded, words):
    assert words in wrong(MUTANT, graded)


def test_a_correct_file_must_pass_without_a_diagnosis():
    assert wrong(CORRECT, verdict(Status.PASS)) is None
    assert "graded fail" in wrong(CORRECT, verdict(Status.FAIL))
    assert "passed with a diagnosis" in wrong(CORRECT, verdict(Status.PASS, diagnosis=["looks like: x"]))


@pytest.mark.parametrize("argv", [["no_such_kata"], ["softmax", "--seeds", "0"]])
def test_bad_input_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2

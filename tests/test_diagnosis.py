"""The failure diagnosis (judge/testing/diagnosis.py): each pattern signature with an example
it must name and one it must not; known slips named by replaying them; and what reaches the
learner (the table, the JSON) quotes sentences, never code."""

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from judge.paths import ROOT
from judge.plugin import stop_early
from judge.protocol import SEVERAL, SINGLE, most_specific
from judge.testing import diagnosis
from judge.testing import checks
from judge.testing.checks import Mismatch

ROWS = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7 - 0.5
SQUARE = torch.arange(9, dtype=torch.float64).reshape(3, 3) / 5 + 0.1
TOLERANCE = {"rtol": 1e-7, "atol": 1e-7}


def run(signature, got, want, sizes=None):
    return signature(got, want, TOLERANCE, sizes or {})


def test_constant_factor_names_the_scale():
    assert "times 4 = sqrt(E) (E = 16)" in run(diagnosis.constant_factor, ROWS * 4, ROWS, {"E": 16})
    assert "= sqrt(hs) (hs = 4)" in run(diagnosis.constant_factor, ROWS * 2, ROWS, {"E": 8, "H": 2})
    assert "opposite sign" in run(diagnosis.constant_factor, -ROWS, ROWS)
    assert run(diagnosis.constant_factor, ROWS + 0.1, ROWS) is None
    assert run(diagnosis.constant_factor, ROWS, ROWS) is None


def test_transposed():
    assert "transposed" in run(diagnosis.transposed, SQUARE.T, SQUARE)
    assert run(diagnosis.transposed, SQUARE * 2, SQUARE) is None


def test_inverted_mask():
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert "polarity is inverted" in run(diagnosis.inverted_mask, ~mask, mask)
    assert run(diagnosis.inverted_mask, mask.tril(), mask) is None


def test_only_one_row_right():
    last_only = ROWS.clone()
    last_only[:-1] += 1
    assert "only the last row is right" in run(diagnosis.one_row_right, last_only, ROWS)
    first_only = ROWS.clone()
    first_only[1:] += 1
    assert "only the first row is right" in run(diagnosis.one_row_right, first_only, ROWS)
    middle_wrong = ROWS.clone()
    middle_wrong[1] += 1
    assert run(diagnosis.one_row_right, middle_wrong, ROWS) is None


def test_values_in_wrong_places():
    heads_mixed = ROWS.reshape(3, 2, 2).transpose(1, 2).reshape(3, 4)
    assert "wrong places" in run(diagnosis.values_in_wrong_places, heads_mixed, ROWS)
    assert run(diagnosis.values_in_wrong_places, ROWS * 1.5, ROWS) is None


def test_nan_rows():
    nan_rows = ROWS.clone()
    nan_rows[1] = math.nan
    assert "NaN fills whole rows" in run(diagnosis.nan_rows, nan_rows, ROWS)
    scattered = ROWS.clone()
    scattered[1, 2] = math.nan
    assert run(diagnosis.nan_rows, scattered, ROWS) is None


def test_shifted_rows():
    shifted = ROWS + torch.tensor([[0.5], [-1.0], [2.0]], dtype=torch.float64)
    assert "constant along each row" in run(diagnosis.shifted_rows, shifted, ROWS)
    assert run(diagnosis.shifted_rows, ROWS * 2, ROWS) is None


def test_wrong_kind():
    assert "dtype is torch.float64, not torch.float32" in diagnosis.wrong_kind(ROWS, ROWS.float())
    assert "made on meta" in diagnosis.wrong_kind(torch.empty(3, 4, device="meta"), ROWS)
    assert diagnosis.wrong_kind(ROWS * 3, ROWS.float()) is None


def test_signatures_of_a_mismatch_give_at_most_two_lines():
    error = Mismatch("wrong", what="output", actual=ROWS * 4, expected=ROWS, tolerance=TOLERANCE)
    line = "every value is the expected one times 4 = sqrt(E) (E = 16): check the scale"
    assert diagnosis.signatures(error, {"E": 16}) == [line]
    mixed = Mismatch("wrong", what="output", actual=ROWS.flip(-1) * 3 + 1, expected=ROWS, tolerance=TOLERANCE)
    assert diagnosis.signatures(mixed, {}) == []


def test_the_most_specific_diagnosis_is_chosen():
    one, several = [SINGLE + "A."], [SEVERAL + "A. / B."]
    assert most_specific([[], several, one]) == one
    assert most_specific([[], several]) == several
    assert most_specific([[], []]) == []


def test_a_failure_replayed_by_a_slip_names_it():
    """The causal_mask slips, replayed on the same call: the one giving the learner's mask is named."""
    diagnosis.reset_budget()
    learner = torch.ones(5, 5, dtype=torch.bool).triu(0)  # the diagonal blocked too
    expected = torch.ones(5, 5, dtype=torch.bool).triu(1)
    error = Mismatch("wrong mask", what="mask", actual=learner, expected=expected)
    lines = diagnosis.diagnose("causal_mask", error, lambda module: {"mask": module.causal_mask(5)}, {"n": 5})
    assert lines == [SINGLE + "The diagonal is blocked too: a position must be able to see itself."]


def test_a_slip_is_matched_on_every_part_of_a_structured_result():
    """Evidence made of parts (each run's tokens and the logits they came from) matches a slip
    only when every part does: tensors within the tolerance, the rest exactly."""
    diagnosis.reset_budget()
    tokens, logits = [[1, 2, 3]], torch.tensor([0.5, 0.25])
    error = Mismatch("wrong tokens", what="runs", actual=((tokens, [logits]),), expected=None)
    assert diagnosis._same(((tokens, [logits + 1e-9]),), error.actual, error)
    assert not diagnosis._same(((tokens, [logits + 1e-2]),), error.actual, error), "the logits tell the slips apart"
    assert not diagnosis._same(((tokens, [logits, logits]),), error.actual, error)


def test_a_mismatch_shows_as_many_digits_as_tell_the_numbers_apart():
    """1.57646563 and 1.57646563 at 9 digits, 1.06e-10 apart (issue 21): shown until they differ."""
    got, want = torch.tensor([1.5764656312345], dtype=torch.float64), torch.tensor([1.5764656313405], dtype=torch.float64)
    with pytest.raises(Mismatch) as raised:
        checks.assert_close(got, want, call="f(x)", tolerance={"rtol": 1e-13, "atol": 1e-13})
    shown = str(raised.value).split("got ")[1].split(", off by")[0]
    printed_got, printed_want = shown.split(", expected ")
    assert printed_got != printed_want, f"the message hides the difference: {raised.value}"
    assert checks.distinct(0.1, 0.1) == ("0.1", "0.1")


def test_a_correct_result_is_never_diagnosed():
    diagnosis.reset_budget()
    with diagnosis.diagnosing("causal_mask", lambda module: {"mask": module.causal_mask(5)}):
        pass  # nothing failed: nothing to say
    with pytest.raises(NotImplementedError) as raised, diagnosis.diagnosing("causal_mask", lambda m: {}):
        raise NotImplementedError
    assert not hasattr(raised.value, "kata_diagnosis"), "the stub's NotImplementedError needs no diagnosis"


@pytest.mark.timeout(300)
def test_the_table_and_the_json_show_the_diagnosis_and_no_code(tmp_path):
    from judge.mutants import load_mutants

    mutant = next(m for m in load_mutants("multi_head_attention") if m.name == "softmax_over_queries")
    (tmp_path / "multi_head_attention.py").write_text(mutant.source())
    out = tmp_path / "result.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "grader.py"), "--impl", str(tmp_path), "--kata", "multi_head_attention"]
        + ["--no-timing", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert f"looks like: {mutant.why}" in run.stdout, run.stdout
    [kata] = json.loads(out.read_text())["katas"]
    assert kata["diagnosis"] == [SINGLE + mutant.why]
    code = [edit.replace.strip() for edit in mutant.edits]
    assert not any(fragment in run.stdout for fragment in code), "a diagnosis never shows the slip's code"


def test_watch_and_mock_show_the_diagnosis():
    """make watch and make mock print each verdict with verdict_block."""
    from judge.practice.common import verdict_block
    from judge.protocol import KataResult, Status

    failure = {"name": "matches", "message": "causal_mask(5) returned a wrong mask"}
    result = KataResult(
        "causal_mask", Status.FAIL, 0.5, 2, 4, "2 of 4 failed", [failure], diagnosis=[SINGLE + "A slip."]
    )
    lines = verdict_block(result, label="causal_mask", seed=1, colour=False, latency=None)
    assert "    looks like: A slip." in lines


@pytest.mark.parametrize(
    "maxfail, diagnosis, stops",
    [
        (3, [SINGLE + "A."], True),  # settled: a full grade shows this one
        (3, [], True),  # nothing to name: the verdict is settled all the same
        (3, [SEVERAL + "A. / B."], False),  # a later failure may name one (most_specific)
        (0, [SINGLE + "A."], False),  # a full grade runs every test
    ],
)
def test_a_grade_that_stops_early_goes_past_a_failure_that_names_several_slips(maxfail, diagnosis, stops):
    item = SimpleNamespace(
        config=SimpleNamespace(getoption=lambda name: {"maxfail": maxfail}[name]),
        session=SimpleNamespace(shouldfail=False),
    )
    stop_early(item, SimpleNamespace(kata_diagnosis=diagnosis))
    assert bool(item.session.shouldfail) == stops

"""Learning paths and reviews (judge.learning): make next follows a path, a passed kata comes
back for a redo in interview mode 1, 3, 7 and 21 days later, a failed redo starts the ladder
again; make progress shows each path and never counts an untouched stub."""

import io

import pytest

from judge.catalog import CatalogError, load_catalog
from judge.history import History
from judge.learning import DAY, LearningPath, load_paths, next_step, standings
from judge.places import Places
from judge.practice import next as next_kata
from judge.practice.progress import progress_text

CATALOG = load_catalog()
NAMES = [kata.name for kata in CATALOG]
PATHS = load_paths(CATALOG)
T0 = 1_800_000_000.0


def grade(kata: str, status: str, at: float, source: str = "watch") -> dict:
    return {
        "ts": at,
        "event": "grade",
        "kata": kata,
        "status": status,
        "score": 1.0 if status == "pass" else 0.0,
        "source": source,
    }


def interview(kata: str, passed: bool, at: float) -> dict:
    return {
        "ts": at,
        "event": "mock",
        "mode": "interview",
        "katas": [{"kata": kata, "status": "pass" if passed else "fail"}],
    }


def test_every_kata_stands_in_a_path_and_the_first_path_starts_with_the_first_kata_to_take():
    assert {name for path in PATHS for name in path.katas} == set(NAMES)
    assert PATHS[0].katas[0] == "positional_encoding"


def test_a_path_naming_no_kata_is_refused(tmp_path):
    info = tmp_path / "info.toml"
    info.write_text('[[path]]\nname = "x"\ntitle = "X"\nkatas = ["causal_mask", "no_such_kata"]\n')
    with pytest.raises(CatalogError, match="no kata named"):
        load_paths(CATALOG, info)


def test_next_is_the_first_kata_of_the_path_not_yet_passed():
    records = [grade("positional_encoding", "pass", T0), grade("padding_mask", "fail", T0 + 60)]
    step = next_step(PATHS, standings(records, NAMES), T0 + 120)
    assert (step.kind, step.kata, step.path.name) == ("kata", "padding_mask", PATHS[0].name)


def test_a_pass_inside_a_mock_or_an_untouched_stub_is_not_a_pass():
    records = [grade("positional_encoding", "pass", T0, source="mock"), grade("positional_encoding", "todo", T0)]
    assert next_step(PATHS, standings(records, NAMES), T0).kata == "positional_encoding"


def test_a_passed_kata_comes_back_after_1_3_7_and_21_days_then_is_learnt():
    records = [grade("causal_mask", "pass", T0)]
    at = T0
    for days in (1, 3, 7, 21):
        found = standings(records, NAMES)["causal_mask"]
        assert found.due == pytest.approx(at + days * DAY)
        step = next_step(PATHS, standings(records, NAMES), found.due + 60)
        assert (step.kind, step.kata) == ("review", "causal_mask")
        at = found.due + 3600
        records.append(interview("causal_mask", True, at))
    assert standings(records, NAMES)["causal_mask"].learnt


def test_a_failed_redo_starts_the_ladder_again_and_an_early_redo_is_only_practice():
    records = [grade("causal_mask", "pass", T0), interview("causal_mask", True, T0 + 0.5 * DAY)]
    assert standings(records, NAMES)["causal_mask"].due == pytest.approx(T0 + DAY)  # early: not a review
    records += [interview("causal_mask", True, T0 + 1.1 * DAY)]
    assert standings(records, NAMES)["causal_mask"].due == pytest.approx(T0 + 1.1 * DAY + 3 * DAY)
    records += [interview("causal_mask", False, T0 + 5 * DAY)]
    found = standings(records, NAMES)["causal_mask"]
    assert (found.rung, found.due) == (0, pytest.approx(T0 + 6 * DAY))


def test_make_next_names_a_due_review_before_the_next_kata(tmp_path):
    places = Places(tmp_path / "katas", tmp_path / "state")
    history = History(places.history_file)
    history.append(grade("positional_encoding", "pass", T0))
    out = io.StringIO()
    next_kata.next_command(None, places, out=out, now=lambda: T0 + 60)
    assert out.getvalue().startswith("Next in The 2017 Transformer: padding_mask (")
    out = io.StringIO()
    next_kata.next_command(None, places, out=out, now=lambda: T0 + 2 * DAY)
    assert out.getvalue().startswith("Next: a review of positional_encoding (due since ")
    assert "make interview KATA=positional_encoding" in out.getvalue()


def test_progress_shows_each_path_and_counts_no_untouched_stub(tmp_path):
    records = [grade("causal_mask", "todo", T0), grade("positional_encoding", "pass", T0)]
    text = progress_text(records, CATALOG, {}, tmp_path / "history.jsonl", PATHS, now=T0 + 2 * DAY)
    first = next(line for line in text.splitlines() if line.startswith(PATHS[0].shown_title))
    assert "1/11 passed" in first and "next: padding_mask" in first and "reviews due: positional_encoding" in first
    row = next(line for line in text.splitlines() if line.startswith("causal_mask "))
    assert row.split()[1:4] == ["-", "0", "-"]  # no best, no attempt, no last verdict


def test_a_path_title_is_shown_in_the_learners_language(monkeypatch):
    monkeypatch.setenv("KATAS_LANG", "zh")
    assert LearningPath("p", "The path", ["causal_mask"], "路径").shown_title == "路径"


def test_watch_next_moves_on_to_the_next_kata_of_the_path_after_a_pass(tmp_path):
    """make watch NEXT=1: the path's next kata is watched, and graded at once."""
    from judge.practice.watch import Watcher, move_on, next_on_path
    from judge.protocol import KataResult, Status

    class Engine:
        def grade(self, name, path, seed):
            return KataResult(name, Status.TODO, 0.0, 0, 3, "not started")

    places = Places(tmp_path / "katas", tmp_path / "state")
    places.katas.mkdir()
    (places.katas / "padding_mask.py").write_text("raise NotImplementedError\n")
    History(places.history_file).append(grade("positional_encoding", "pass", T0))
    assert next_on_path(CATALOG, places) == "padding_mask"
    out = io.StringIO()
    watcher = Watcher(
        Engine(), places.katas, ["positional_encoding"], seed=1, history=History(places.history_file), out=out
    )
    move_on(watcher, CATALOG, places)
    assert watcher.names == ["padding_mask"]
    assert "Next: padding_mask: " in out.getvalue() and "padding_mask: todo  0/3 tests" in out.getvalue()

"""What a newcomer meets first: `make grade`/`make check` end in a next step, not a make error;
SEED= reaches them; a kata may be named as a file; a typo gets the nearest name; the replay advice
appears only where the hidden shapes matter, in the form the learner typed."""

import io
import os
import re
import subprocess
import sys

import pytest
import torch

from judge.advice import next_step, replay_line
from judge.catalog import CatalogError, kata_aliases, kata_names, load_catalog, resolve_kata
from judge.errors import UsageError
from judge.paths import ROOT
from judge.protocol import KataResult, Status
from judge.reporting import katas_counted, table
from judge.status_line import StatusLine
from judge.stubs import make_stub
from judge.testing.checks import Mismatch, assert_close
from judge.timing import format_timing

NAMES = kata_names(load_catalog())
ALIASES = kata_aliases(load_catalog())


def result(name: str, status: Status) -> KataResult:
    return KataResult(name, status, 1.0 if status == Status.PASS else 0.0, 1, 2, "")


@pytest.mark.parametrize("typed", ["causal_mask", "causal_mask.py", "katas/causal_mask.py", "./katas/causal_mask.py"])
def test_a_kata_may_be_named_by_its_file(typed):
    assert resolve_kata(typed, NAMES) == "causal_mask"


def test_a_typo_is_answered_with_the_nearest_kata():
    with pytest.raises(UsageError, match="did you mean causal_mask"):
        resolve_kata("casual_mask", NAMES)


@pytest.mark.parametrize(
    ("typed", "kata"),
    [
        ("mha", "multi_head_attention"),
        ("sdpa", "scaled_dot_product_attention"),
        ("gqa", "grouped_query_attention"),
        ("rope", "rotary_embedding"),
        ("moe", "moe"),
        ("kv", "kv_cache"),
        ("flash", "flash_attention"),
        ("MHA", "multi_head_attention"),
        ("Layer-Norm", "layer_norm"),
    ],
)
def test_names_people_use_name_the_kata(typed, kata):
    assert resolve_kata(typed, NAMES, ALIASES) == kata


def test_a_word_several_katas_share_lists_them_all():
    """Not the nearest one (attention is no typo of flash_attention): every kata it could mean."""
    with pytest.raises(
        UsageError, match="'attention' could be any of: scaled_dot_product_attention, multi_head"
    ) as raised:
        resolve_kata("attention", NAMES, ALIASES)
    assert "flash_attention" in str(raised.value) and "did you mean" not in str(raised.value)


def test_a_typo_of_an_alias_gets_the_kata_it_stands_for():
    with pytest.raises(UsageError, match="did you mean multi_head_attention"):
        resolve_kata("mhaa", NAMES, ALIASES)


def test_an_alias_that_is_taken_is_refused(tmp_path):
    info = tmp_path / "info.toml"
    entry = 'name = "{}"\ntitle = "t"\ndifficulty = 1\nminutes = 5\nreference = "r"\nhints = ["h"]\naliases = ["{}"]\n'
    info.write_text(
        "[[kata]]\n" + entry.format("causal_mask", "mask") + "[[kata]]\n" + entry.format("padding_mask", "mask")
    )
    with pytest.raises(CatalogError, match="padding_mask's alias 'mask' is not a free"):
        load_catalog(info)


def test_a_name_near_nothing_lists_the_katas():
    with pytest.raises(UsageError, match="the katas are: positional_encoding"):
        resolve_kata("zzz", NAMES)


def test_replay_advice_only_where_the_shapes_matter(monkeypatch):
    monkeypatch.delenv("KATAS_VIA_MAKE", raising=False)
    for status in (Status.TODO, Status.ERROR, Status.FORBIDDEN, Status.PASS):
        assert replay_line([result("causal_mask", status)], 7, single=True) is None
    line = replay_line([result("causal_mask", Status.FAIL)], 7, single=True)
    assert line == "Replay these exact hidden shapes: python grader.py --kata causal_mask --seed 7"


def test_replay_advice_in_make_form_when_run_through_make(monkeypatch):
    monkeypatch.setenv("KATAS_VIA_MAKE", "1")
    one = replay_line([result("causal_mask", Status.FAIL)], 7, single=True)
    assert one == "Replay these exact hidden shapes: make check KATA=causal_mask SEED=7"
    many = [result("causal_mask", Status.FAIL), result("padding_mask", Status.TIMEOUT)]
    assert replay_line(many, 7, single=False) == "Replay these exact hidden shapes: make grade SEED=7"


def test_the_next_step_is_the_first_broken_kata_then_the_first_untouched_one(monkeypatch):
    monkeypatch.setenv("KATAS_VIA_MAKE", "1")
    todo_first = [result("positional_encoding", Status.TODO), result("causal_mask", Status.TODO)]
    assert next_step(todo_first, own_katas=True) == (
        "Next: start with katas/positional_encoding.py (fill in its TODOs), then make check KATA=positional_encoding"
    )
    broken = [result("positional_encoding", Status.TODO), result("causal_mask", Status.FAIL)]
    assert next_step(broken, own_katas=True).startswith("Next: fix katas/causal_mask.py")
    assert "make hint KATA=causal_mask" in next_step(broken, own_katas=True)
    assert next_step(broken, own_katas=False) is None  # grading solutions/ or another folder
    passing = [result("positional_encoding", Status.PASS), result("causal_mask", Status.PASS)]
    assert "make mock" in next_step(passing, own_katas=True)


@pytest.mark.parametrize("content", [None, "", "  \n\n"])
def test_the_next_step_for_a_missing_or_empty_file_is_make_reset(monkeypatch, tmp_path, content):
    """The same advice make watch gives: the stub comes back with make reset, not "fix" a file that is not there."""
    monkeypatch.setenv("KATAS_VIA_MAKE", "1")
    if content is not None:
        (tmp_path / "causal_mask.py").write_text(content)
    broken = [result("causal_mask", Status.ERROR)]
    assert next_step(broken, own_katas=True, folder=tmp_path) == (
        "Next: katas/causal_mask.py is missing or empty; make reset KATA=causal_mask brings the stub back"
    )


def run_make(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    # A make above this one (make test ARGS=-x) passes its variables down: the run starts clean.
    env = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")}
    return subprocess.run(
        ["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(300)
def test_make_check_on_an_untouched_stub_ends_in_a_next_step_not_a_make_error(tmp_path):
    (tmp_path / "causal_mask.py").write_text(make_stub((ROOT / "solutions" / "causal_mask.py").read_text()))
    run = run_make("check", "KATA=katas/causal_mask.py", "SEED=7", f"ARGS=--impl {tmp_path} --no-timing")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Error" not in run.stdout + run.stderr
    assert "(seed 7)" in run.stdout and "todo" in run.stdout
    assert "Replay" not in run.stdout  # a todo does not depend on the shapes


@pytest.mark.timeout(300)
def test_make_check_with_a_bad_kata_name_is_still_an_error():
    run = run_make("check", "KATA=casual_mask")
    assert run.returncode == 2
    assert "did you mean causal_mask?" in run.stderr


def test_make_works_from_inside_katas():
    """An editor is often opened in katas/: make there runs the project's own targets, with the
    same variables (a dry run, -n, shows the command it would run)."""
    forwarded = run_make("-n", "check", "KATA=causal_mask.py", "SEED=7", cwd=ROOT / "katas")
    assert forwarded.returncode == 0, forwarded.stdout + forwarded.stderr
    assert 'grader.py --kata "causal_mask.py" --seed 7' in forwarded.stdout
    shown = run_make("-s", cwd=ROOT / "katas")
    assert shown.returncode == 0 and "make check" in shown.stdout, shown.stdout + shown.stderr


def test_a_debug_print_is_shown_under_the_table_but_costs_nothing():
    printed = KataResult("causal_mask", Status.PASS, 1.0, 3, 3, "all 3 tests passed", printed="mask shape: (5, 5)\n")
    shown = table([printed], impl="katas", seed=1, colour=False, timing=False)
    assert "causal_mask: it printed 'mask shape: (5, 5)': remove debug prints before an interview" in shown
    assert "Score: 100.0 / 100" in shown


@pytest.mark.parametrize(
    ("printed", "shown"),
    [
        ("a\nb\nc\n", "'a'... (3 lines, 6 characters)"),
        ("x" * 100, "'" + "x" * 60 + "'... (100 characters)"),
        ("debug " * 50 + " ...", "'" + "debug " * 10 + "'... (more than 300 characters)"),
    ],
)
def test_a_long_print_is_one_line_of_the_table_with_a_count(printed, shown):
    """Its first line, cut, and how much there was: a flood never widens the table."""
    result = KataResult("causal_mask", Status.PASS, 1.0, 3, 3, "", printed=printed)
    line = table([result], impl="katas", seed=1, colour=False, timing=False).splitlines()[-2]
    assert line == f"causal_mask: it printed {shown}: remove debug prints before an interview (not counted against you)"


def test_the_guide_for_coding_assistants_names_only_real_make_targets():
    guide = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = set(re.findall(r"`make ([a-z-]+)", guide))
    assert {"check", "hint", "diff", "reset"} <= named <= targets, named - targets
    assert "never write" in (ROOT / "CLAUDE.md").read_text(encoding="utf-8")


def test_a_timing_whose_rounds_disagree_is_called_unreliable_not_shown_as_a_ratio():
    steady = {"median_s": 2e-3, "reference_median_s": 1e-3, "ratio": 2.0, "ratio_low": 1.9, "ratio_high": 2.1}
    steady |= {"spread": 0.1, "reliable": True, "threads": 1}
    assert format_timing({"cpu": steady}) == "cpu 2.00x (2 ms vs 1 ms, 1 thread)"
    busy = steady | {"ratio_low": 1.2, "ratio_high": 6.5, "spread": 4.4, "reliable": False}
    shown = format_timing({"cpu": busy})
    assert "machine busy, timing unreliable" in shown and "1.20x to 6.50x" in shown and "2.00x" not in shown


def test_the_status_line_names_what_runs_and_erases_itself():
    stream = io.StringIO()
    line = StatusLine(stream, 2, enabled=True)
    line("start", "causal_mask")
    line("done", "causal_mask")
    line("timing", "causal_mask")
    line.clear()
    text = stream.getvalue()
    assert "grading causal_mask (0 of 2 done)" in text and "(1 of 2 done)" in text
    assert "timing causal_mask against PyTorch" in text and text.endswith("\r\033[K")
    quiet = io.StringIO()
    off = StatusLine(quiet, 1, enabled=False)
    off("start", "causal_mask")
    off.clear()
    assert quiet.getvalue() == ""  # not a terminal: the table alone


def readme_shape(name: str) -> dict:
    text = (ROOT / name).read_text(encoding="utf-8")
    return {
        "headings": [len(line.split()[0]) for line in text.splitlines() if re.match(r"#{1,4} ", line)],
        "make targets": sorted(set(re.findall(r"`make ([a-z]+)", text))),
        "code blocks": text.count("```"),
        "katas in tables": sorted(re.findall(r"^\| `([a-z_0-9]+)` \|", text, flags=re.MULTILINE)),
    }


@pytest.mark.parametrize(("english", "chinese"), [("README.md", "README.zh-CN.md"), ("docs/guide.md", "docs/guide.zh-CN.md")])
def test_the_chinese_readme_has_the_english_ones_structure(english, chinese):
    """Issue 15, friction 11: the same sections, commands, examples and katas in both languages
    (the README, and the guide it points to)."""
    shapes = readme_shape(english), readme_shape(chinese)
    for what in shapes[0]:
        assert shapes[1][what] == shapes[0][what], f"{chinese} drifted from {english}: {what}"


def prose(text: str) -> str:
    """`text` without its fenced and indented blocks."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return "\n".join(line for line in text.splitlines() if not line.startswith("    "))


FIGURE = re.compile(r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?=x\b| ?倍)")  # a ratio: 1.43x, 2-3x, 10 倍


@pytest.mark.parametrize(("english", "chinese"), [("README.md", "README.zh-CN.md"), ("docs/guide.md", "docs/guide.zh-CN.md")])
def test_the_chinese_docs_quote_the_english_ones_figures(english, chinese):
    """Issue 22: one set of measurements for both languages: every ratio the English states,
    the Chinese states too, in the same order (re-measure the English, then copy its figures).
    The examples of output (fenced or indented blocks) are real runs, each in its language."""
    figures = [FIGURE.findall(prose((ROOT / name).read_text(encoding="utf-8"))) for name in (english, chinese)]
    assert figures[1] == figures[0], f"{chinese}'s ratios differ from {english}'s"


@pytest.mark.parametrize("name", ["README.md", "README.zh-CN.md"])
def test_the_readme_is_read_in_five_minutes(name):
    """Issue 22: at most 200 lines; the guide (docs/) holds the rest, and the README links to it."""
    text = (ROOT / name).read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200 and "docs/guide" in text


def test_one_kata_is_counted_in_the_singular():
    assert (katas_counted(1), katas_counted(3)) == ("1 kata", "3 katas")
    one = table([result("causal_mask", Status.PASS)], impl="katas", seed=1, colour=False, timing=False)
    assert "(1 of 1 kata passes)" in one
    two = [result("causal_mask", Status.PASS), result("padding_mask", Status.FAIL)]
    two = table(two, impl="katas", seed=1, colour=False, timing=False)
    assert "(1 of 2 katas pass)" in two


def test_a_nan_is_named_without_a_verb_to_agree_and_minus_zero_reads_as_zero():
    with pytest.raises(Mismatch) as raised:
        assert_close(torch.tensor([float("nan"), 1.0]), torch.tensor([-0.0, 1.0]), call="f(x)", what="weights")
    assert str(raised.value) == "f(x) returned weights with NaN at index (0,) (1 of 2 elements); expected 0"
    with pytest.raises(Mismatch) as raised:
        assert_close(torch.tensor([0.5]), torch.tensor([-0.0]), call="f(x)")
    assert "got 0.5, expected 0, off by 0.5" in str(raised.value)

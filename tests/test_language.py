"""The learner's language (judge/language.py): every text the tools print through tr(...) has a
Chinese version with the same placeholders, and KATAS_LANG (or the locale) switches the practice
loop and the grader's prose between English and 简体中文, leaving commands, paths and code as they are."""

import argparse
import ast
import io
import os
import re
import string
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import pytest
import torch
from english_words import english_prose

from judge import advice, reporting
from judge.catalog import Kata, load_catalog
from judge.language import language, tr
from judge.mutants import load_mutants
from judge.paths import ROOT
from judge.places import Places
from judge.practice import common, hint, mock, progress
from judge.protocol import SEVERAL, SINGLE, KataResult, Status
from judge.testing import diagnosis
from judge.texts_zh import ZH

LOCALE_VARIABLES = ("KATAS_LANG", "LC_ALL", "LC_MESSAGES", "LANG")


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setenv("KATAS_LANG", "zh")
    monkeypatch.setenv("KATAS_VIA_MAKE", "1")


@pytest.fixture
def english(monkeypatch):
    monkeypatch.setenv("KATAS_LANG", "en")
    monkeypatch.setenv("KATAS_VIA_MAKE", "1")


# --------------------------------------------------------------------------- every template has its translation


def tr_calls() -> list[tuple[str, int, ast.expr]]:
    """(file, line, first argument) of every tr(...) call in judge/."""
    calls = []
    for path in sorted((ROOT / "judge").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            called = node.func if isinstance(node, ast.Call) else None
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
            if name == "tr":
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                calls.append((where, node.lineno, node.args[0] if node.args else None))
    return calls


def placeholders(template: str) -> dict[str, set[str]]:
    """Each placeholder's name, with the format specs it is written with."""
    found: dict[str, set[str]] = {}
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is not None:
            found.setdefault(name, set()).add(f"{spec}!{conversion}")
    return found


def test_the_code_prints_its_texts_through_tr():
    assert len(tr_calls()) >= 80


def test_every_tr_template_is_a_string_literal():
    bad = [
        where
        for where, _, first in tr_calls()
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str))
    ]
    assert not bad, f"tr(...) needs a string literal as its template (the Chinese is looked up by it): {bad}"


def test_every_tr_template_has_a_chinese_version_with_the_same_placeholders():
    missing, different = [], []
    for where, _, first in tr_calls():
        if not isinstance(first, ast.Constant):
            continue
        template = first.value
        if template not in ZH:
            missing.append(f"{where}: {template!r}")
        elif placeholders(template) != placeholders(ZH[template]):
            different.append(f"{where}: {template!r} vs {ZH[template]!r}")
    assert not missing, "judge/texts_zh.py lacks:\n" + "\n".join(missing)
    assert not different, "placeholders (or their format specs) differ:\n" + "\n".join(different)


def test_every_chinese_version_formats_with_the_values_the_english_takes():
    for template, chinese in ZH.items():
        values = {
            name: 1.5 if any(spec and spec[-1] in "fgeEd%" or spec[:1] in ".>" for spec in specs) else "x"
            for name, specs in placeholders(template).items()
        }
        template.format(**values)
        chinese.format(**values)


# --------------------------------------------------------------------------- which language


def test_the_chinese_locale_picks_chinese_and_katas_lang_overrides_it(monkeypatch):
    for variable in LOCALE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert language() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert language() == "zh" and tr("time is up") == "时间到"
    monkeypatch.setenv("KATAS_LANG", "en")
    assert language() == "en" and tr("time is up") == "time is up"
    monkeypatch.setenv("KATAS_LANG", "zh")
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert language() == "zh"


# --------------------------------------------------------------------------- the grader's table


def graded() -> list[KataResult]:
    failure = {"name": "matches the reference", "message": "causal_mask(5) returned a wrong mask"}
    return [
        KataResult(
            "causal_mask", Status.FAIL, 0.5, 2, 4, "2 of 4 tests failed", [failure], diagnosis=[SINGLE + "A slip."]
        ),
        KataResult("padding_mask", Status.TODO, 0.0, 0, 3, "not started"),
    ]


def grader_table(results: list[KataResult]) -> str:
    closing = (advice.replay_line(results, 7, single=False), advice.next_step(results, own_katas=True))
    return reporting.table(results, impl="katas", seed=7, colour=False, timing=True, advice=closing)


def test_the_table_speaks_chinese_and_keeps_its_columns_and_commands(chinese):
    text = grader_table(graded())
    assert "评测 katas（种子 7）" in text
    assert "总分：25.0 / 100   （2 道题中 0 道通过）" in text
    assert "重现这组隐藏形状：make check KATA=causal_mask SEED=7" in text
    assert "下一步：修改 katas/causal_mask.py（见上文），然后运行 make check KATA=causal_mask" in text
    assert "卡住了？make hint KATA=causal_mask" in text
    assert "    看起来像：A slip." in text.splitlines()
    header = next(line for line in text.splitlines() if line.startswith("题目 "))
    row = next(line for line in text.splitlines() if line.startswith("causal_mask "))
    assert "状态" in header and "得分" in header and "未通过" in row  # the status words in Chinese too

    def column(line: str, word: str) -> int:  # where `word` starts, in terminal columns (a Chinese character: 2)
        before = line[: line.index(word)]
        return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in before)

    assert column(header, "状态") == column(row, "未通过")  # the columns stay aligned


def test_the_table_speaks_english(english):
    text = grader_table(graded())
    assert "Grading katas (seed 7)" in text
    assert "Score: 25.0 / 100   (0 of 2 katas pass)" in text
    assert "Replay these exact hidden shapes: make check KATA=causal_mask SEED=7" in text
    assert "Next: fix katas/causal_mask.py (see above), then make check KATA=causal_mask" in text
    assert "    looks like: A slip." in text.splitlines()


def test_a_diagnosis_keeps_its_english_marker_in_the_data_and_shows_it_in_chinese(chinese):
    assert reporting.shown_diagnosis(SINGLE + "一个错误。") == "看起来像：一个错误。"
    assert reporting.shown_diagnosis(SEVERAL + "A / B") == "看起来像以下之一：A / B"
    assert reporting.shown_diagnosis("off by a constant") == "off by a constant"
    assert graded()[0].diagnosis == ["looks like: A slip."]


def test_a_pattern_signature_is_written_in_the_learners_language(chinese, monkeypatch):
    rows = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7 - 0.5
    tolerance = {"rtol": 1e-7, "atol": 1e-7}
    assert diagnosis.constant_factor(-rows, rows, tolerance, {}) == "每个值的符号都反了：某处符号写反了"
    assert "（E = 16）：检查缩放系数" in diagnosis.constant_factor(rows * 4, rows, tolerance, {"E": 16})
    monkeypatch.setenv("KATAS_LANG", "en")
    assert (
        diagnosis.constant_factor(-rows, rows, tolerance, {}) == "every value has the opposite sign: a sign is flipped"
    )


# --------------------------------------------------------------------------- the practice loop


def watch_block(latency: float | None = 0.4) -> str:
    return "\n".join(common.verdict_block(graded()[0], label="causal_mask", seed=7, colour=False, latency=latency))


def test_a_watch_verdict_speaks_chinese(chinese):
    text = watch_block()
    assert text.startswith("causal_mask: 未通过  2/4 个测试通过  （保存后 0.4 秒出判定）")
    assert "    第一个失败的检查：matches the reference：causal_mask(5) returned a wrong mask" in text
    assert "    看起来像：A slip." in text
    assert "    （隐藏形状来自种子 7：重启之前保持不变）" in text


def test_a_watch_verdict_speaks_english(english):
    text = watch_block()
    assert text.startswith("causal_mask: fail  2/4 tests  (verdict 0.4 s after the save)")
    assert "    first failing check: matches the reference" in text and "    looks like: A slip." in text
    assert "(hidden shapes from seed 7: the same until you restart)" in text


CAUSAL_MASK = Kata(
    name="causal_mask",
    title="Causal (subsequent) mask",
    difficulty=1,
    minutes=5,
    reference="nn.Transformer.generate_square_subsequent_mask(n) == -inf",
    hints=["Look at torch.triu.", "Mask the future: above the diagonal.", "torch.triu(ones, diagonal=1)"],
    title_zh="因果（后续）掩码",
    hints_zh=["看看 torch.triu。", "屏蔽未来：对角线上方。", "torch.triu(ones, diagonal=1)"],
)


@pytest.fixture
def a_catalog(monkeypatch):
    """A catalog whose kata has its title and hints in both languages, as info.toml gives them."""
    monkeypatch.setattr(hint, "load_catalog", lambda: [CAUSAL_MASK])
    return [CAUSAL_MASK]


def ask_hint(tmp_path: Path) -> str:
    out = io.StringIO()
    places = Places(tmp_path / "katas", tmp_path / "state")
    assert hint.hint_command(argparse.Namespace(kata="causal_mask"), places, out=out, now=1_800_000_000) == 0
    return out.getvalue()


def test_a_hint_shows_the_chinese_title_and_hint(chinese, a_catalog, tmp_path):
    first = ask_hint(tmp_path)
    assert "causal_mask「因果（后续）掩码」的第 1 条提示，共 3 条：" in first
    assert "  1. 看看 torch.triu。" in first and "（还有 2 条：make hint KATA=causal_mask）" in first
    ask_hint(tmp_path)
    assert "（这是最后一条提示）" in ask_hint(tmp_path)
    assert "causal_mask 没有更多提示了：全部 3 条都在下面。下一步：make diff KATA=causal_mask" in ask_hint(tmp_path)


def test_a_hint_shows_the_english_title_and_hint(english, a_catalog, tmp_path):
    first = ask_hint(tmp_path)
    assert "Hint 1 of 3 for causal_mask (Causal (subsequent) mask):" in first
    assert "  1. Look at torch.triu." in first and "(2 more: make hint KATA=causal_mask)" in first


HISTORY = [
    {"event": "grade", "kata": "causal_mask", "source": "watch", "sha": "a", "status": "fail", "score": 0.5},
    {
        "event": "mock",
        "ts": 1_800_000_000,
        "mock": "m",
        "passed": 1,
        "score": 100.0,
        "katas": [{"kata": "causal_mask", "status": "pass", "solve_s": 250.0}],
    },
]


def test_progress_speaks_chinese(chinese, tmp_path):
    text = progress.progress_text(HISTORY, [CAUSAL_MASK], {"causal_mask": 1}, tmp_path / "history.jsonl")
    assert "练习进度，来自" in text and "（2 条记录）" in text
    assert "模拟面试：1 次；" in text and "1 道题中 1 道通过，得分 100。" in text
    assert "best：评测过的最高分" in text
    assert "还没有历史记录" in progress.progress_text([], [CAUSAL_MASK], {}, tmp_path / "history.jsonl")


def test_progress_speaks_english(english, tmp_path):
    text = progress.progress_text(HISTORY, [CAUSAL_MASK], {"causal_mask": 1}, tmp_path / "history.jsonl")
    assert "(2 records)" in text and "Mock interviews: 1;" in text and "1 of 1 pass, score 100." in text
    assert "No history yet" in progress.progress_text([], [CAUSAL_MASK], {}, tmp_path / "history.jsonl")


REPORT = {
    "mock": "20261121-101500",
    "seed": 42,
    "minutes": 50.0,
    "elapsed_s": 3000.0,
    "reason": "time is up",
    "passed": 1,
    "score": 92.0,
    "katas": [
        {
            "kata": "causal_mask",
            "status": "pass",
            "best_score": 1.0,
            "first_pass_s": 245.0,
            "solve_s": 245.0,
            "suggested_minutes": 5,
            "vs_suggested": 0.82,
            "hints": 1,
        },
        {
            "kata": "multi_head_attention",
            "status": "fail",
            "best_score": 0.84,
            "first_pass_s": None,
            "solve_s": None,
            "suggested_minutes": 30,
            "vs_suggested": None,
            "hints": 2,
        },
    ],
}


def test_the_mock_report_and_task_list_speak_chinese(chinese, tmp_path):
    text = mock.report_text(REPORT)
    assert "模拟面试 20261121-101500 报告：时间到，用时 50:00，限时 50:00（种子 42）" in text
    assert "2 道题中 1 道通过；得分 92 / 100（每道题取面试期间的最好成绩）。" in text
    assert "took：从上一道题首次通过" in text
    plan = mock.MockPlan("x", tmp_path, 3, ["causal_mask"], 5.0, 0.0)
    tasks = mock.task_list(plan, [CAUSAL_MASK])
    assert "模拟面试 x：1 道题，限时 5:00（种子 3）" in tasks
    assert "  1. causal_mask  ★☆☆☆☆    5 分钟  因果（后续）掩码" in tasks
    assert "卡住了？make hint KATA=name（计入报告）。" in tasks


def test_the_mock_report_and_task_list_speak_english(english, tmp_path):
    text = mock.report_text(REPORT)
    assert "Mock interview 20261121-101500 report: time is up after 50:00 of 50:00 (seed 42)" in text
    assert "1 of 2 pass; score 92 / 100 (the best score of each kata during the interview)." in text
    plan = mock.MockPlan("x", tmp_path, 3, ["causal_mask"], 5.0, 0.0)
    assert "  1. causal_mask  ★☆☆☆☆    5 min  Causal (subsequent) mask" in mock.task_list(plan, [CAUSAL_MASK])


# --------------------------------------------------------------------------- every kata in both languages


@pytest.mark.parametrize("kata", load_catalog(), ids=lambda kata: kata.name)
def test_every_kata_has_its_title_hints_and_reference_in_chinese(kata):
    assert kata.title_zh and kata.reference_zh, f"info.toml: {kata.name} needs title_zh and reference_zh"
    assert kata.hints_zh and len(kata.hints_zh) == len(kata.hints), f"info.toml: {kata.name} needs hints_zh"


@pytest.mark.parametrize("kata", load_catalog(), ids=lambda kata: kata.name)
def test_every_slip_is_explained_in_chinese_too(kata):
    missing = [m.name for m in load_mutants(kata.name) if not m.why_zh]
    assert not missing, f"tests/mutants/{kata.name}.toml: why_zh missing for {missing}"


@pytest.mark.parametrize("kata", load_catalog(), ids=lambda kata: kata.name)
def test_every_stub_names_its_chinese_title_in_its_first_line(kata):
    first = (ROOT / "katas" / f"{kata.name}.py").read_text(encoding="utf-8").splitlines()[0]
    assert kata.title_zh in first, f"katas/{kata.name}.py's first line should name {kata.title_zh!r}"


def test_every_make_target_is_described_in_chinese_too():
    """make help reads each target's `## ` text from the Makefile: each has its Chinese."""
    from judge.make_help import described

    missing = [text for _, text in described(ROOT / "Makefile") if text not in ZH]
    assert not missing, "judge/texts_zh.py lacks the Chinese of these make help texts:\n" + "\n".join(missing)


def test_make_help_speaks_chinese(chinese):
    from judge.make_help import help_text

    shown = help_text(ROOT / "Makefile", "python3")
    assert "列出所有目标" in shown and "make interview" in shown and "list the targets" not in shown


def test_make_help_piped_into_head_ends_quietly():
    run = subprocess.run("make -s help | head -1", shell=True, cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.stdout.startswith("Transformer Katas") and "Traceback" not in run.stderr and "Error" not in run.stderr


# --------------------------------------------------------------------------- errors of the commands


def said(command: str, **env) -> str:
    """What `command` (run in the repository) prints on stderr and stdout, less make's own line."""
    outer = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS", "KATA")}
    run = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, check=False, env=outer | env)
    lines = (run.stderr + run.stdout).splitlines()
    return "\n".join(line for line in lines if not re.match(r"make(\[\d+\])?: \*\*\*", line))  # make's own


@pytest.mark.parametrize(
    ("command", "chinese_line"),
    [
        ("make -s check", "grader.py: 错误：请指定题目，例如 make check KATA=causal_mask（题目有："),
        ("make -s grade PYTHON=/bin/false", "错误：/bin/false 缺少依赖；请这样装上其余的："),
        (
            ".venv/bin/python grader.py --seed x",
            "grader.py: 错误：参数 --seed：无效的 int 值：'x'（见：python grader.py --help）",
        ),
        (
            ".venv/bin/python grader.py --bogus",
            "grader.py: 错误：无法识别的参数：--bogus（见：python grader.py --help）",
        ),
        (".venv/bin/python practice.py mock --minutes 0", "参数 --minutes：MINUTES 必须大于 0，收到的是 '0'"),
        (".venv/bin/python practice.py frobnicate", "参数 COMMAND：无效的选项 'frobnicate'（可选："),
    ],
    ids=[
        "make check, no kata",
        "make without its dependencies",
        "bad --seed",
        "unknown option",
        "bad minutes",
        "bad command",
    ],
)
def test_a_commands_error_is_one_chinese_line(command, chinese_line):
    if command.startswith(".venv") and not (ROOT / ".venv").is_dir():
        command = command.replace(".venv/bin/python", sys.executable, 1)
    shown = said(command, KATAS_LANG="zh")
    assert len(shown.splitlines()) == 1 and chinese_line in shown, shown
    assert not english_prose(shown), shown


def test_a_commands_error_stays_english_in_english():
    assert said("make -s check", KATAS_LANG="en").startswith("grader.py: error: name the kata, e.g. make check KATA=")
    assert said("make -s grade PYTHON=/bin/false", KATAS_LANG="en").startswith("error: /bin/false lacks a dependency")


def test_every_fixed_text_that_arrives_as_data_has_its_chinese():
    """Texts shown through tr_data: why a refusal refuses (judge.forbidden's Rules.why), the
    NaN hints of the attention modules."""
    from judge import forbidden
    from judge.testing import modules

    reasons = {rules.why for rules in vars(forbidden).values() if isinstance(rules, forbidden.Rules) and rules.why}
    texts = [why for reason in reasons for why in reason.split("; ")] + [modules.NN_NAN_HINT, modules.SDPA_NAN_HINT]
    texts.append(forbidden._ENGINE)  # refused under its name
    missing = [text for text in texts if text not in ZH]
    assert not missing, f"judge/texts_zh.py lacks: {missing}"


def test_a_thread_that_speaks_a_language_keeps_it_whatever_the_variable_becomes(monkeypatch):
    """The suite's pool composes the process engine's verdicts in threads of the suite's own
    process while its tests set KATAS_LANG for themselves (ProcessEngine.grade speaks its own)."""
    from judge.language import language, speaking

    monkeypatch.setenv("KATAS_LANG", "zh")
    seen = {}
    with speaking("en"):
        seen["pinned"] = language()
        other = threading.Thread(target=lambda: seen.update(other=language()))
        other.start()
        other.join()
        with speaking(None):
            seen["nested, nothing named"] = language()
    seen["after"] = language()
    assert seen == {"pinned": "en", "other": "zh", "nested, nothing named": "en", "after": "zh"}

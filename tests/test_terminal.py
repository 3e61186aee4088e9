"""Issue 22's "done when", driven the way a learner drives it: the commands in a
pseudo-terminal (a tty, as in tmux), in Chinese. An interview on a bare stub graded on its
math; then make next following the path, a review falling due when the history says the pass
was two days ago; then progress by path. And grade, a failing check, hint, watch and a mock
interview, each with no English prose outside code, names and numbers."""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from english_words import english_prose

from judge.mutants import load_mutants
from judge.paths import ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\r")
ENGLISH = re.compile(r"\b(?:the|passed?|fail(?:ed)?|tests?|next|review|kata|score|left)\b")


class Terminal:
    """A practice command on a pseudo-terminal: what it shows, read until a pattern appears."""

    def __init__(
        self, *args: str, state: Path, katas: Path | None = None, script: str = "practice.py", tmp: Path | None = None
    ):
        self.main, secondary = pty.openpty()
        env = dict(os.environ, KATAS_STATE=str(state), KATAS_LANG="zh", TERM="xterm")
        env.pop("NO_COLOR", None)
        if katas is not None:
            env["KATAS_DIR"] = str(katas)
        if tmp is not None:  # where its grades make their folders
            env["TMPDIR"] = str(tmp)
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / script), *args],
            cwd=ROOT,
            env=env,
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            close_fds=True,
        )
        os.close(secondary)
        self.shown = ""

    def read_until(self, pattern: str, timeout: float = 90) -> str:
        end = time.monotonic() + timeout
        while not re.search(pattern, ANSI.sub("", self.shown)):
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {pattern!r} on the terminal; it shows:\n{ANSI.sub('', self.shown)}")
            if select.select([self.main], [], [], min(left, 0.5))[0]:
                try:
                    self.shown += os.read(self.main, 65536).decode("utf-8", errors="replace")
                except OSError:  # the command ended
                    break
        return ANSI.sub("", self.shown)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)
        os.close(self.main)


def run(*args: str, state: Path, **options) -> str:
    """A command that ends by itself: all it showed."""
    terminal = Terminal(*args, state=state, **options)
    try:
        terminal.process.wait(timeout=60)
        while select.select([terminal.main], [], [], 1)[0]:
            try:
                chunk = os.read(terminal.main, 65536)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            terminal.shown += chunk.decode("utf-8", errors="replace")
        return ANSI.sub("", terminal.shown)
    finally:
        terminal.close()


@pytest.mark.timeout(180)
def test_an_interview_then_the_path_and_its_review_in_a_chinese_terminal(tmp_path):
    state = tmp_path / "state"
    terminal = Terminal("interview", "--kata", "mha", "--minutes", "5", "--seed", "7", "--no-timing", state=state)
    try:
        shown = terminal.read_until("判题器在开始后 .* 秒就绪")
        [stub] = (state / "interview").glob("*/multi_head_attention.py")
        bare = stub.read_text(encoding="utf-8")
        assert "面试题" in bare and "raise NotImplementedError" in bare and "TODO" not in bare
        assert "形状：" in bare and "Conventions" not in bare
        stub.write_text((ROOT / "solutions" / "multi_head_attention.py").read_text(encoding="utf-8"))
        shown = terminal.read_until("面试 [0-9-]+ 报告：")
    finally:
        terminal.close()
    verdict = shown.split("秒就绪")[1]
    assert re.search(r"multi_head_attention: 通过  \d+/\d+ 个测试通过", verdict), verdict
    assert "生产级的版本还会加上" in shown  # the conventions, listed after the verdict, not counted

    # the history says causal_mask passed two days ago: its first review is due; the path goes on
    history = state / "history.jsonl"
    passed = {
        "ts": time.time() - 2 * 86400,
        "event": "grade",
        "kata": "causal_mask",
        "source": "watch",
        "status": "pass",
        "score": 1.0,
    }
    with open(history, "a", encoding="utf-8") as file:
        file.write(json.dumps(passed) + "\n")
    shown = run("next", state=state)
    assert "复习 causal_mask" in shown and "make interview KATA=causal_mask" in shown
    shown = run("progress", state=state)
    assert "2017 年的 Transformer  已通过 1/11" in shown and "待复习：causal_mask" in shown
    prose = re.sub(r"`[^`]*`|[A-Za-z_]+\.py|\b[a-z]+_[a-z_]+\b|make [a-z]+( KATA=[a-z_]+)?", "", shown)
    words = ENGLISH.findall(
        prose.split("\n\n")[0] + "\n" + "\n".join(line for line in prose.splitlines() if "已通过" in line)
    )
    assert not words, f"English outside code and names: {words}"


def slip(kata: str, name: str) -> str:
    """The text of one of the kata's mutants (tests/mutants/<kata>.toml)."""
    return next(m for m in load_mutants(kata) if m.name == name).source()


@pytest.mark.timeout(240)
def test_grade_check_hint_watch_and_mock_speak_chinese_in_a_terminal(tmp_path):
    katas, state = tmp_path / "katas", tmp_path / "state"
    katas.mkdir()
    for stub in ("causal_mask", "softmax", "padding_mask"):
        (katas / f"{stub}.py").write_text((ROOT / "katas" / f"{stub}.py").read_text(encoding="utf-8"))
    (katas / "softmax.py").write_text(slip("softmax", "no_max_subtraction"))
    (katas / "padding_mask.py").write_text((ROOT / "solutions" / "padding_mask.py").read_text(encoding="utf-8"))
    seen = {}

    grade = ("--impl", str(katas), "--no-timing", "--seed", "3")
    # the three katas of the folder (the others' files are missing: 33 grades of "no file"), by
    # one worker: a second would start a second fork server (3.5 CPU-s) for the language alone
    three = ("--kata", "causal_mask", "--kata", "softmax", "--kata", "padding_mask", "--jobs", "1")
    seen["grade"] = run(*grade, *three, state=state, script="grader.py")
    assert "总分：" in seen["grade"] and "未开始" in seen["grade"] and "通过" in seen["grade"]
    seen["check"] = run(*grade, "--kata", "softmax", state=state, script="grader.py")
    assert "softmax: 未通过：" in seen["check"] and "看起来像：" in seen["check"]
    seen["hint"] = run("hint", "--kata", "softmax", state=state, katas=katas)
    assert "第 1 条提示" in seen["hint"]

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    watch = Terminal("watch", "--kata", "causal_mask", "--seed", "3", "--no-timing", state=state, katas=katas, tmp=tmp)
    try:
        watch.read_until("就绪")
        (katas / "causal_mask.py").write_text(slip("causal_mask", "diagonal_blocked"))
        watch.read_until("causal_mask: 未通过")
        (katas / "causal_mask.py").write_text((ROOT / "solutions" / "causal_mask.py").read_text(encoding="utf-8"))
        seen["watch"] = watch.read_until("causal_mask: 通过")
    finally:
        watch.close()

    mock = Terminal(
        "mock", "--n", "1", "--seed", "5", "--minutes", "5", "--no-timing", state=state, katas=katas, tmp=tmp
    )
    try:
        mock.read_until("判题器在开始后 .* 秒就绪")
        [stub] = (state / "mock").glob("*/*.py")
        stub.write_text((ROOT / "solutions" / stub.name).read_text(encoding="utf-8"))
        seen["mock"] = mock.read_until("模拟面试 [0-9-]+ 报告：")
    finally:
        mock.close()

    left = {command: found for command, shown in seen.items() if (found := english_prose(shown))}
    assert not left, f"English prose in the Chinese output: {left}"
    # the watch was stopped by SIGTERM while a grade stood by for the next save: it cleaned up
    left_behind = sorted(p.name for p in tmp.glob("kata-*"))
    assert not left_behind, f"a stopped watch or mock left its grades' folders: {left_behind}"

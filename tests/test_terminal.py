"""Issue 22's "done when", driven the way a learner drives it: the practice commands in a
pseudo-terminal (a tty, as in tmux), in Chinese. An interview on a bare stub graded on its
math; then make next following the path, a review falling due when the history says the pass
was two days ago; then progress by path."""

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

from judge.paths import ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\r")
ENGLISH = re.compile(r"\b(?:the|passed?|fail(?:ed)?|tests?|next|review|kata|score|left)\b")


class Terminal:
    """A practice command on a pseudo-terminal: what it shows, read until a pattern appears."""

    def __init__(self, *args: str, state: Path):
        self.main, secondary = pty.openpty()
        env = dict(os.environ, KATAS_STATE=str(state), KATAS_LANG="zh", TERM="xterm")
        env.pop("NO_COLOR", None)
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "practice.py"), *args],
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


def run(*args: str, state: Path) -> str:
    """A command that ends by itself: all it showed."""
    terminal = Terminal(*args, state=state)
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

"""`make help`: the Makefile's targets with what each does, in the learner's language.

Run as `python -m judge.make_help Makefile` by any Python 3 (no dependency, no torch): each
target line's `## text` is its description; judge/texts_zh.py holds the Chinese of each
(a test proves none is missing)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from judge.language import tr, tr_data

TARGET = re.compile(r"^([a-z-]+):.*?## (.*)$")


def described(makefile: Path) -> list[tuple[str, str]]:
    """(target, its description) for each target line with a `## ` description, in order."""
    return [m.groups() for line in makefile.read_text(encoding="utf-8").splitlines() if (m := TARGET.match(line))]


def help_text(makefile: Path, python: str) -> str:
    lines = [tr("Transformer Katas: edit a stub under katas/, then grade it.")]
    lines += [f"  make {target:<18}{tr_data(text)}" for target, text in described(makefile)]
    lines.append(
        tr(
            'Variables: KATA=name, ARGS="grader options" (see: {python} grader.py --help), PYTHON=your-python',
            python=python,
        )
    )
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        print(help_text(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "python3"), flush=True)
    except BrokenPipeError:  # `make help | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

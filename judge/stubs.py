"""Stubs generated from the solutions, strictly (as nbgrader does).

A solution marks each part the learner writes with `### BEGIN SOLUTION` and
`### END SOLUTION` lines. In the stub each region becomes its `# TODO:` lines followed by
`raise NotImplementedError`, at the region's indentation; everything outside the regions
(docstrings, signatures) is kept as it is, so the two can never drift apart. A nested,
unterminated or unopened region is refused with StubError.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from judge.paths import KATAS, ROOT, SOLUTIONS

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
TODO = "# TODO:"


class StubError(ValueError):
    """A solution's regions are malformed."""


def make_stub(solution: str, *, source: str = "the solution") -> str:
    """The learner's stub for `solution`'s text. Raises StubError for a malformed region."""
    out: list[str] = []
    opened: int | None = None  # line number of the open region's BEGIN
    indent = ""
    for number, line in enumerate(solution.splitlines(keepends=True), 1):
        text = line.strip()
        if text == BEGIN:
            if opened is not None:
                raise StubError(f"{source}, line {number}: BEGIN SOLUTION inside the region opened on line {opened}")
            opened, indent = number, line[: len(line) - len(line.lstrip())]
        elif text == END:
            if opened is None:
                raise StubError(f"{source}, line {number}: END SOLUTION without a BEGIN SOLUTION")
            opened = None
            out.append(f"{indent}raise NotImplementedError\n")
        elif opened is None or text.startswith(TODO):
            out.append(line)
    if opened is not None:
        raise StubError(f"{source}, line {opened}: BEGIN SOLUTION is never closed")
    return "".join(out)


def reference_text(text: str) -> str:
    """The solution as the learner reads it (make diff): without the BEGIN/END lines, and without
    the TODO lines its regions keep for the stub (a learner who deleted them changed nothing)."""
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        marker = line.strip()
        if marker in (BEGIN, END):
            inside = marker == BEGIN
        elif not (inside and marker.startswith(TODO)):
            out.append(line)
    return "".join(out)


def solution_text(name: str, solutions: Path = SOLUTIONS) -> str:
    return (solutions / f"{name}.py").read_text(encoding="utf-8")


def stub_text(name: str, solutions: Path = SOLUTIONS) -> str:
    return make_stub(solution_text(name, solutions), source=f"solutions/{name}.py")


def committed_text(path: Path) -> str | None:
    """The file as committed at HEAD, or None outside git or when not committed."""
    try:
        return subprocess.run(
            ["git", "show", f"HEAD:{path.resolve().relative_to(ROOT).as_posix()}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None


def refresh_stubs(names: list[str], *, write: bool) -> tuple[list[Path], list[Path]]:
    """Compare (or, with `write`, regenerate) katas/NAME.py with the generated stubs.

    Returns (written, stale). A stub the learner edited (different from HEAD's) is never
    replaced: it is reported stale instead."""
    written, stale = [], []
    for name in names:
        stub = stub_text(name)
        target = KATAS / f"{name}.py"
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == stub:
            continue
        if write and current in (None, committed_text(target)):
            target.write_text(stub, encoding="utf-8")
            written.append(target)
        else:
            stale.append(target)
    return written, stale

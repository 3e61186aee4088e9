"""What the learner should type next, in the form they used: make's when the run came through the
Makefile (it sets KATAS_VIA_MAKE=1), the grader's own flags otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from judge.language import tr
from judge.paths import KATAS
from judge.protocol import KataResult, Status

# Statuses whose cause may depend on the hidden shapes: replaying the seed can reproduce them.
SHAPE_DEPENDENT = (Status.FAIL, Status.TIMEOUT, Status.CRASH)


def via_make() -> bool:
    return os.environ.get("KATAS_VIA_MAKE") == "1"


def check_command(name: str, seed: int | None = None) -> str:
    if via_make():
        return f"make check KATA={name}" + (f" SEED={seed}" if seed is not None else "")
    return f"python grader.py --kata {name}" + (f" --seed {seed}" if seed is not None else "")


def hint_command(name: str) -> str:
    return f"make hint KATA={name}" if via_make() else f"python practice.py hint --kata {name}"


def reset_command(name: str) -> str:
    return f"make reset KATA={name}" if via_make() else f"python practice.py reset --kata {name}"


def replay_line(results: list[KataResult], seed: int, *, single: bool) -> str | None:
    """How to replay the hidden shapes, only when a verdict may depend on them."""
    shaped = [r for r in results if r.status in SHAPE_DEPENDENT]
    if not shaped:
        return None
    if single or len(shaped) == 1:
        return tr("Replay these exact hidden shapes: {command}", command=check_command(shaped[0].name, seed))
    command = f"make grade SEED={seed}" if via_make() else f"python grader.py --seed {seed}"
    return tr("Replay these exact hidden shapes: {command}", command=command)


def next_step(results: list[KataResult], *, own_katas: bool, folder: Path = KATAS) -> str | None:
    """One neutral next step: the first kata that is neither passing nor untouched (its file
    missing or empty: bring the stub back), else the first untouched one. Only for the learner's
    own files (katas/, `folder`), where opening the file makes sense."""
    if not own_katas or not results:
        return None
    broken = [r for r in results if r.status not in (Status.PASS, Status.TODO)]
    if broken:
        name = broken[0].name
        path = folder / f"{name}.py"
        if not path.is_file() or not path.read_text(encoding="utf-8", errors="replace").strip():
            return tr(
                "Next: katas/{name}.py is missing or empty; {reset} brings the stub back",
                name=name,
                reset=reset_command(name),
            )
        return tr(
            "Next: fix katas/{name}.py (see above), then {check}; stuck? {hint}",
            name=name,
            check=check_command(name),
            hint=hint_command(name),
        )
    todo = [r for r in results if r.status == Status.TODO]
    if todo:
        name = todo[0].name
        return tr(
            "Next: start with katas/{name}.py (fill in its TODOs), then {check}", name=name, check=check_command(name)
        )
    if len(results) > 1:
        return tr(
            "Next: every kata passes. Rehearse under a clock: {command}",
            command="make mock" if via_make() else "python practice.py mock",
        )
    return None

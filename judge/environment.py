"""Whether this Python can grade at all: a missing dependency is the environment's fault, said in
one line, never a kata's verdict (nor an attempt in the practice history)."""

from __future__ import annotations

import importlib.util
import sys

from judge.errors import UsageError
from judge.language import tr

GRADING_NEEDS = ("torch", "numpy", "pytest")


def require_grading_dependencies() -> None:
    missing = [name for name in GRADING_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            tr(
                "{python} lacks {missing}: run `make setup`, or use the make targets",
                python=sys.executable,
                missing=", ".join(missing),
            )
        )

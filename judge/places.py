"""Where the learner's kata files and the learner's own state live.

Kata files: katas/ (or $KATAS_DIR). State (git-ignored): .katas/ (or $KATAS_STATE), with
history.jsonl, hints.json, attempts/<kata>/<timestamp>.py and mock/<timestamp>/.
The tests point both at a temporary folder."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from judge.paths import KATAS, ROOT


@dataclass
class Places:
    katas: Path
    state: Path

    @classmethod
    def default(cls) -> Places:
        katas = os.environ.get("KATAS_DIR") or str(KATAS)
        state = os.environ.get("KATAS_STATE") or str(ROOT / ".katas")
        return cls(Path(katas).resolve(), Path(state).resolve())

    @property
    def history_file(self) -> Path:
        return self.state / "history.jsonl"

    @property
    def hints(self) -> Path:
        return self.state / "hints.json"

    @property
    def attempts(self) -> Path:
        return self.state / "attempts"

    @property
    def mocks(self) -> Path:
        return self.state / "mock"

    @property
    def interviews(self) -> Path:
        return self.state / "interview"

    def kata_file(self, name: str) -> Path:
        return self.katas / f"{name}.py"


def shown(path: Path) -> str:
    """A path as the learner would type it: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` as a whole: a reader (or an interrupted run) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def read_json(path: Path, default):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def fingerprint(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]

"""The learner's language: English or Chinese (简体中文), for the prose the tools print.

KATAS_LANG=zh or en chooses; without it the system locale decides (LC_ALL, LC_MESSAGES, LANG
starting with "zh" mean Chinese). Texts are written in English in the code, wrapped in
tr("template {name}", name=...); judge/texts_zh.py holds their Chinese templates, and a test
proves every template the code uses has one with the same placeholders. What quotes code,
shapes and numbers is left as it is."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

# Imported here, not when first needed: a kata process may no longer import by then (judge.forbidden).
from judge.texts_zh import ZH

T = TypeVar("T")

LANGUAGES = ("en", "zh")
_thread = threading.local()  # .language: what speaking() pinned on this thread


def _named(value: str | None) -> str | None:
    """The language `value` names ("en" or "zh", in any case and spacing), else None."""
    code = (value or "").strip().lower()
    return code if code in LANGUAGES else None


def language() -> str:
    chosen = getattr(_thread, "language", None) or _named(os.environ.get("KATAS_LANG"))
    if chosen:
        return chosen
    for variable in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(variable, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


@contextmanager
def speaking(code: str | None) -> Iterator[None]:
    """Within, on this thread only: texts in `code` ("en" or "zh"; anything else changes
    nothing), whatever KATAS_LANG becomes meanwhile. The test suite composes verdicts in
    threads of its own process while its tests set the variable for themselves."""
    previous = getattr(_thread, "language", None)
    _thread.language = _named(code) or previous
    try:
        yield
    finally:
        _thread.language = previous


def tr(template: str, /, **values) -> str:
    """`template` in the learner's language, filled in with `values`."""
    template = tr_data(template)
    return template.format(**values) if values else template


def tr_data(text: str) -> str:
    """A fixed English text that arrived as data (an unjudged test's reason): its Chinese version
    when there is one and the learner reads Chinese."""
    return ZH.get(text, text) if language() == "zh" else text


def pick(english: T, chinese: T | None) -> T:
    """What has both versions (a kata's title or hints, a slip's why): the learner's one."""
    return chinese if chinese and language() == "zh" else english

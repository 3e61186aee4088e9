"""What the practice commands share: finding a kata, clocks and stamps, showing a verdict."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TextIO

from judge.catalog import Kata, kata_aliases, kata_not_named, resolve_kata
from judge.language import tr
from judge.protocol import KataResult
from judge.reporting import paint, printed_line, shown_diagnosis, status_word, unjudged_lines


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment).strftime("%Y%m%d-%H%M%S")


def when(moment: float) -> str:
    """A moment as the learner reads it: 2026-11-25 08:30."""
    return datetime.fromtimestamp(moment).strftime("%Y-%m-%d %H:%M")


def fresh_path(folder: Path, stem: str, suffix: str = "") -> Path:
    """folder/stem+suffix, or folder/stem-2+suffix... when taken."""
    candidate, number = folder / f"{stem}{suffix}", 1
    while candidate.exists():
        number += 1
        candidate = folder / f"{stem}-{number}{suffix}"
    return candidate


def clock(seconds: float | None) -> str:
    """12:05 (minutes:seconds), or 1:02:05 past an hour; '-' for None."""
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def find_kata(catalog: list[Kata], name: str | None, *, example: str) -> Kata:
    names = [k.name for k in catalog]
    if not name:
        raise kata_not_named(names, example)
    chosen = resolve_kata(name, names, kata_aliases(catalog))
    return next(kata for kata in catalog if kata.name == chosen)


def colour_enabled(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty() and not os.environ.get("NO_COLOR")


def first_failure(result: KataResult, width: int = 600) -> str:
    """The first failing check's message for a fail; the verdict's own message otherwise."""
    if result.status == "fail" and result.failures:
        first = result.failures[0]
        text = tr("{name}: {message}", name=first["name"], message=first.get("message", ""))
    else:
        text = result.message
    lines = text.strip().splitlines()
    text = "\n".join(lines[:6]) + ("\n..." if len(lines) > 6 else "")
    return text if len(text) <= width else text[:width] + " ..."


def verdict_block(result: KataResult, *, label: str, seed: int, colour: bool, latency: float | None) -> list[str]:
    status = paint(status_word(result.status), result.status, colour)
    head = tr(
        "{label}: {status}  {passed}/{total} tests",
        label=label,
        status=status,
        passed=result.passed,
        total=result.total,
    )
    if latency is not None:
        head += tr("  (verdict {latency:.1f} s after the save)", latency=latency)
    lines = [head]
    indent = "    "
    if result.status != "pass":
        text = first_failure(result).replace("\n", "\n" + indent + "  ")
        if result.status == "fail":
            lines.append(indent + tr("first failing check: {text}", text=text))
        else:
            lines.append(indent + tr("why: {text}", text=text))
        lines += [f"{indent}{shown_diagnosis(line)}" for line in result.diagnosis]
        if result.status == "fail":
            lines.append(indent + tr("(hidden shapes from seed {seed}: the same until you restart)", seed=seed))
    if note := printed_line(result):
        lines.append(f"{indent}{note}")
    if result.status in ("pass", "fail"):
        lines += [f"{indent}{line}" for line in unjudged_lines([result])]
    return lines

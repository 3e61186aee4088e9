"""Learning paths and reviews: which kata comes next, and when a passed one comes back.

A path (info.toml's [[path]] tables) is an order to take katas in. The current path is the
first, in info.toml's order, with a kata not yet passed; its first such kata is next,
unless a review is due.

Reviews are spaced repetition, read from the history the grader keeps: a kata passed once
(a grade of your katas/ file) comes back for a timed redo in interview mode (make interview)
1, 3, 7 and 21 days later. A redo counts once it is due: passed, the next rung; failed, the
ladder starts again (due the next day). After the 21-day redo the kata is learnt.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from judge.catalog import CatalogError, Kata
from judge.language import pick
from judge.paths import INFO

LADDER_DAYS = (1, 3, 7, 21)
DAY = 86400.0


@dataclass(frozen=True)
class LearningPath:
    name: str
    title: str
    katas: list[str]
    title_zh: str | None = None

    @property
    def shown_title(self) -> str:
        return pick(self.title, self.title_zh)


def load_paths(katas: list[Kata], path: Path = INFO) -> list[LearningPath]:
    """The paths in order; every name a kata's, every kata in at least one path."""
    with open(path, "rb") as file:
        entries = tomllib.load(file).get("path", [])
    names = {kata.name for kata in katas}
    paths = []
    for number, entry in enumerate(entries, 1):
        try:
            found = LearningPath(**entry)
        except TypeError as error:
            raise CatalogError(f"{path.name}, path #{number}: {error}") from None
        unknown = [name for name in found.katas if name not in names]
        if unknown or not found.katas:
            raise CatalogError(f"{path.name}, path {found.name!r}: no kata named {unknown[:1] or 'at all'}")
        paths.append(found)
    left_out = sorted(names - {name for p in paths for name in p.katas})
    if paths and left_out:
        raise CatalogError(f"{path.name}: kata {left_out[0]!r} is in no path")
    return paths


@dataclass
class Standing:
    """Where one kata stands: passed (on your katas/ file) or not, and its review ladder."""

    passed_at: float | None = None
    rung: int = 0  # reviews passed in a row
    due: float | None = None  # when the next review is due; None: none (not passed yet, or learnt)
    redos: list[tuple[float, bool]] = field(default_factory=list)  # (when, passed) of each counted redo

    @property
    def learnt(self) -> bool:
        return self.passed_at is not None and self.due is None


def redo_of(record: dict) -> tuple[str, bool] | None:
    """(kata, passed) of an interview's report (make interview: one kata), else None."""
    if record.get("event") != "mock" or record.get("mode") != "interview" or len(record.get("katas", [])) != 1:
        return None
    kata = record["katas"][0]
    return kata.get("kata"), kata.get("status") == "pass"


def standings(records: list[dict], names: list[str]) -> dict[str, Standing]:
    """Each kata's standing, from the history in the order it was written."""
    found = {name: Standing() for name in names}
    for record in records:
        at = float(record.get("ts", 0))
        name = record.get("kata")
        if record.get("event") == "grade" and record.get("source") != "mock" and name in found:
            standing = found[name]
            if record.get("status") == "pass" and standing.passed_at is None:
                standing.passed_at, standing.due = at, at + LADDER_DAYS[0] * DAY
            continue
        redo = redo_of(record)
        if redo is None or redo[0] not in found:
            continue
        standing = found[redo[0]]
        if standing.due is None or at < standing.due:  # early, or not passed yet: practice, not a review
            continue
        standing.redos.append((at, redo[1]))
        standing.rung = standing.rung + 1 if redo[1] else 0
        standing.due = at + LADDER_DAYS[standing.rung] * DAY if standing.rung < len(LADDER_DAYS) else None
    return found


@dataclass(frozen=True)
class Next:
    """What to do next: review a kata, or take the next one of a path (or nothing left)."""

    kind: str  # "review", "kata" or "done"
    kata: str | None = None
    path: LearningPath | None = None
    due: float | None = None  # for a review: when it fell due; for "done": the next review, if any


def next_kata(paths: list[LearningPath], found: dict[str, Standing]) -> tuple[LearningPath, str] | None:
    """The current path and its first kata not yet passed; None when every kata passes."""
    return next(((path, name) for path in paths for name in path.katas if found[name].passed_at is None), None)


def next_step(paths: list[LearningPath], found: dict[str, Standing], now: float) -> Next:
    due = sorted((s.due, name) for name, s in found.items() if s.due is not None and s.due <= now)
    if due:
        return Next("review", due[0][1], due=due[0][0])
    taking = next_kata(paths, found)
    if taking is not None:
        return Next("kata", taking[1], taking[0])
    upcoming = [s.due for s in found.values() if s.due is not None]
    return Next("done", due=min(upcoming) if upcoming else None)


def path_summary(path: LearningPath, found: dict[str, Standing], now: float) -> dict:
    """A path's katas passed, its next one, and its reviews due."""
    passed = [name for name in path.katas if found[name].passed_at is not None]
    upcoming = next((name for name in path.katas if found[name].passed_at is None), None)
    reviews = [name for name in path.katas if found[name].due is not None and found[name].due <= now]
    return {"passed": len(passed), "total": len(path.katas), "next": upcoming, "reviews": reviews}

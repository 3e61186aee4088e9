"""`make progress`: per path the katas passed, the next one and the reviews due (judge.learning);
per kata the best score, attempts, hints, fastest mock solve and trend. An untouched stub is
no attempt."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from judge.catalog import Kata, load_catalog
from judge.history import history_of
from judge.language import tr
from judge.learning import LearningPath, load_paths, path_summary, standings
from judge.places import Places, read_json, shown
from judge.practice.common import clock, when
from judge.reporting import padded, status_word

SPARKS = "▁▂▃▄▅▆▇█"


def hints_used(places: Places) -> dict[str, int]:
    return {k: int(v) for k, v in read_json(places.hints, {}).items()}


# --------------------------------------------------------------------------- reset and diff


def sparkline(scores: list[float]) -> str:
    return "".join(SPARKS[min(len(SPARKS) - 1, int(score * (len(SPARKS) - 1) + 0.5))] for score in scores)


def progress_rows(records: list[dict], catalog: list[Kata], hints: dict[str, int]) -> list[dict]:
    rows = []
    for kata in catalog:
        # Your katas/ files only (a mock's files are fresh stubs in a folder of their own), and
        # not the untouched stub: grading it is no attempt.
        grades = [
            r
            for r in records
            if r.get("event") == "grade"
            and r.get("kata") == kata.name
            and r.get("source") != "mock"
            and r.get("status") != "todo"
        ]
        solves = [
            k.get("solve_s")
            for r in records
            if r.get("event") == "mock"
            for k in r.get("katas", [])
            if k.get("kata") == kata.name and k.get("solve_s") is not None
        ]
        scores = [float(r.get("score", 0)) for r in grades]
        versions = {r.get("sha") or f"#{i}" for i, r in enumerate(grades)}
        rows.append(
            {
                "kata": kata.name,
                "best": max(scores) if scores else None,
                "attempts": len(versions),
                "last": grades[-1]["status"] if grades else None,
                "fastest_mock_s": min(solves) if solves else None,
                "trend": scores[-12:],
                "hints": hints.get(kata.name, 0),
                "hints_total": len(kata.hints),
            }
        )
    return rows


def path_lines(records: list[dict], catalog: list[Kata], paths: list[LearningPath], now: float) -> list[str]:
    """A line per path: katas passed, the next one, the reviews due."""
    found = standings(records, [kata.name for kata in catalog])
    width = max([len(p.shown_title) for p in paths] + [4])
    lines = []
    for path in paths:
        summary = path_summary(path, found, now)
        line = tr("{title}  {passed}/{total} passed", title=f"{path.shown_title:<{width}}", **summary)
        if summary["next"]:
            line += "   " + tr("next: {kata}", kata=summary["next"])
        if summary["reviews"]:
            line += "   " + tr("reviews due: {katas}", katas=", ".join(summary["reviews"]))
        lines.append(line)
    return lines


def progress_text(
    records: list[dict],
    catalog: list[Kata],
    hints: dict[str, int],
    history_path: Path,
    paths: list[LearningPath] = (),
    now: float | None = None,
) -> str:
    if not records:
        return tr(
            "No history yet ({path}). Grades from make watch, make check, make diff and make mock are recorded there.",
            path=shown(history_path),
        )
    rows = progress_rows(records, catalog, hints)
    width = max(len(r["kata"]) for r in rows)
    lines = [
        tr("Progress from {path} ({count} records)", path=shown(history_path), count=len(records)),
        "",
    ]
    if paths:
        lines += [*path_lines(records, catalog, paths, time.time() if now is None else now), ""]
    lines.append(
        f"{padded(tr('kata'), width)}  {padded(tr('best'), 5, right=True)}  {padded(tr('attempts'), 8, right=True)}  "
        f"{padded(tr('last'), 9)} {padded(tr('hints'), 5, right=True)}  {padded(tr('fastest mock'), 12, right=True)}  "
        f"{tr('trend')}"
    )
    for r in rows:
        best = "-" if r["best"] is None else f"{r['best']:.0%}"
        trend = sparkline(r["trend"])
        if len(r["trend"]) >= 2:
            trend += "  " + ("↑" if r["trend"][-1] > r["trend"][0] else "↓" if r["trend"][-1] < r["trend"][0] else "→")
        lines.append(
            f"{r['kata']:<{width}}  {best:>5}  {r['attempts']:>8}  {padded(status_word(r['last']) if r['last'] else '-', 9)} "
            f"{r['hints']:>2}/{r['hints_total']:<2}  {clock(r['fastest_mock_s']):>12}  {trend}".rstrip()
        )
    mocks = [r for r in records if r.get("event") == "mock"]
    lines.append("")
    if mocks:
        last = mocks[-1]
        last_at = when(last.get("ts", 0))
        scores = " ".join(f"{m.get('score', 0):.0f}" for m in mocks[-8:])
        lines.append(
            tr(
                "Mock interviews: {count}; last {when}: {passed} of {total} pass, score {score:.0f}. "
                "Scores, oldest first: {scores}",
                count=len(mocks),
                when=last_at,
                passed=last.get("passed", 0),
                total=len(last.get("katas", [])),
                score=last.get("score", 0),
                scores=scores,
            )
        )
    else:
        lines.append(tr("No mock interview yet: make mock"))
    lines.append(
        tr(
            "best: the highest score graded; attempts: versions of the file graded; trend: recent scores, oldest first;"
            " all from your katas/ files (a mock interview counts only in 'fastest mock')."
        )
    )
    return "\n".join(lines)


def progress_command(args: argparse.Namespace, places: Places, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    paths = load_paths(catalog)
    print(progress_text(history_of(places).read(), catalog, hints_used(places), places.history_file, paths), file=out)
    return 0


# --------------------------------------------------------------------------- command line

"""What the grader shows: the table, the JSON report, colours."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from judge.language import language, tr, tr_data
from judge.protocol import PRINTED_CUT, SEVERAL, SINGLE, KataResult, Status
from judge.timing import format_timing

COLOURS = {
    Status.PASS: "32",
    Status.FAIL: "31",
    Status.TODO: "33",
    Status.ERROR: "35",
    Status.TIMEOUT: "35",
    Status.CRASH: "35",
    Status.FORBIDDEN: "31",
}


def status_word(status: Status | str) -> str:
    """A verdict's word in the learner's language (the data, JSON included, keeps the English one)."""
    words = {
        Status.PASS: tr("pass"),
        Status.FAIL: tr("fail"),
        Status.TODO: tr("todo"),
        Status.ERROR: tr("error"),
        Status.TIMEOUT: tr("timeout"),
        Status.CRASH: tr("crash"),
        Status.FORBIDDEN: tr("forbidden"),
    }
    return words.get(Status(status), str(status))


def padded(text: str, width: int, *, right: bool = False) -> str:
    """`text` padded to `width` terminal columns (a Chinese character takes two)."""
    columns = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    space = " " * max(0, width - columns)
    return space + text if right else text + space


def paint(text: str, status: Status, enabled: bool) -> str:
    return f"\033[{COLOURS[Status(status)]}m{text}\033[0m" if enabled else text


def katas_counted(count: int) -> str:
    """ "1 kata", "3 katas" (in the learner's language)."""
    return tr("1 kata") if count == 1 else tr("{count} katas", count=count)


def total_score(results: list[KataResult]) -> float:
    return 100.0 * sum(r.score for r in results) / len(results) if results else 0.0


PRINT_SHOWN = 60  # characters of a print shown: its first line, cut, so a flood stays one line of the table


def printed_line(result: KataResult) -> str | None:
    """A debug print is shown, never counted: interviewers notice prints left in, tests do not.
    One line of the table: the start of its first line, and how much it printed in all (or
    that it was more than the report kept)."""
    if not result.printed:
        return None
    cut = result.printed.endswith(PRINTED_CUT)
    text = result.printed.removesuffix(PRINTED_CUT) if cut else result.printed
    lines = text.splitlines() or [text]
    printed = repr(lines[0][:PRINT_SHOWN])
    if cut:
        printed += tr("... (more than {chars} characters)", chars=len(text))
    elif len(lines) > 1:
        printed += tr("... ({lines} lines, {chars} characters)", lines=len(lines), chars=len(text))
    elif len(lines[0]) > PRINT_SHOWN:
        printed += tr("... ({chars} characters)", chars=len(text))
    return tr(
        "it printed {printed}: remove debug prints before an interview (not counted against you)",
        printed=printed,
    )


# The marker prefixes a diagnosis line carries in the data (judge.protocol), as the learner reads them.
DIAGNOSIS_PREFIXES_ZH = ((SEVERAL, "看起来像以下之一："), (SINGLE, "看起来像："))


def shown_diagnosis(line: str) -> str:
    """A diagnosis line as shown: its English marker prefix ("looks like: ") in the learner's language.
    The data keeps the English prefixes, which the verdict code reads."""
    if language() == "zh":
        for english, chinese in DIAGNOSIS_PREFIXES_ZH:
            if line.startswith(english):
                return chinese + line[len(english) :]
    return line


def unjudged_lines(results: list[KataResult]) -> list[str]:
    """What this machine could not judge, one line per reason: never counted as passed."""
    by_reason: dict[str, dict[str, int]] = {}
    for r in results:
        if r.status not in (Status.PASS, Status.FAIL):  # its verdict has another cause
            continue
        for test in r.unjudged:
            katas = by_reason.setdefault(test["reason"], {})
            katas[r.name] = katas.get(r.name, 0) + 1
    lines = []
    for reason, katas in by_reason.items():
        count = sum(katas.values())
        where = (
            ", ".join(f"{name} ({n})" for name, n in katas.items()) if len(katas) <= 3 else katas_counted(len(katas))
        )
        if count == 1:
            line = tr(
                "Not judged here, never counted: {count} case in {where}: {reason}.",
                count=count,
                where=where,
                reason=tr_data(reason),
            )
        else:
            line = tr(
                "Not judged here, never counted: {count} cases in {where}: {reason}.",
                count=count,
                where=where,
                reason=tr_data(reason),
            )
        lines.append(line)
    return lines


def details(r: KataResult) -> list[str]:
    """What the table says below its rows about one kata: why it did not pass, what it printed."""
    note = printed_line(r)
    if r.status in (Status.PASS, Status.TODO):
        return [f"{r.name}: {note}"] if note else []
    lines = [tr("{name}: {status}: {message}", name=r.name, status=status_word(r.status), message=r.message)]
    lines += [f"    {shown_diagnosis(line)}" for line in r.diagnosis]
    if note:
        lines.append(f"    {note}")
    if r.status == Status.FAIL:  # other statuses have one cause that explains every failed test
        for failure in r.failures[1:3]:
            also = tr("also: {name}: {message}", name=failure["name"], message=failure.get("message", ""))
            lines.append(f"    {also}".replace("\n", "\n    "))
        if len(r.failures) > 3:
            lines.append("    " + tr("... and {count} more", count=len(r.failures) - 3))
    return lines


def head(*, impl: str, seed: int, width: int) -> list[str]:
    """The lines above the verdicts: what is graded, and the columns."""
    columns = f"{padded(tr('kata'), width)}  {padded(tr('status'), 9)} {padded(tr('score'), 5, right=True)}  "
    columns += padded(tr("tests"), 7, right=True)
    return [tr("Grading {impl} (seed {seed})", impl=impl, seed=seed), "", columns]


def row(r: KataResult, *, width: int, colour: bool) -> str:
    """A kata's verdict on one line, as soon as it is known."""
    status = paint(padded(status_word(r.status), 9), r.status, colour)
    return f"{r.name:<{width}}  {status} {r.score:>5.0%}  {r.passed:>3}/{r.total:<3}".rstrip()


def verdict_end(results: list[KataResult], advice: tuple[str | None, ...] = ()) -> list[str]:
    """Below the rows: why each kata did not pass, what was not judged, the score, what next."""
    lines = [""]
    for r in results:
        lines += details(r)
    lines += unjudged_lines(results)
    passing = sum(r.status == Status.PASS for r in results)
    score = total_score(results)
    if len(results) == 1:
        lines.append(tr("Score: {score:.1f} / 100   ({passing} of 1 kata passes)", score=score, passing=passing))
    else:
        lines.append(
            tr(
                "Score: {score:.1f} / 100   ({passing} of {total} katas pass)",
                score=score,
                passing=passing,
                total=len(results),
            )
        )
    return lines + [line for line in advice if line]


def timing_head() -> str:
    return "\n" + tr("Time vs PyTorch (kata / reference), the passing katas, timed one at a time:")


def timing_row(r: KataResult, *, width: int) -> str:
    return f"{r.name:<{width}}  {format_timing(r.timing)}".rstrip()


def width_of(names: list[str]) -> int:
    return max([len(name) for name in names] + [4])


def table(
    results: list[KataResult], *, impl: str, seed: int, colour: bool, timing: bool, advice: tuple[str | None, ...] = ()
) -> str:
    """The grader's whole report at once (the grader prints it piece by piece as it goes):
    `advice`: closing lines (how to replay, what to do next), None for none."""
    width = width_of([r.name for r in results])
    lines = head(impl=impl, seed=seed, width=width) + [row(r, width=width, colour=colour) for r in results]
    lines += verdict_end(results, advice)
    timed = [r for r in results if r.timing]
    if timing and timed:
        lines += [timing_head()] + [timing_row(r, width=width) for r in timed]
    return "\n".join(lines)


def write_json(path: str | Path, results: list[KataResult], seed: int) -> None:
    data = {"score": round(total_score(results), 2), "seed": seed, "katas": [r.to_json() for r in results]}
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    temporary.replace(target)  # atomic: a reader never sees half a file

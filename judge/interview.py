"""An interview's grade: the math only (the core tier), as an interviewer grades it, and
after it the conventions a production version would add, with how this file fares on them.

The learner works from a bare stub (judge.bare); the tests are the kata's own, all of them,
so the conventions are judged too, just not counted.
"""

from __future__ import annotations

import re
from dataclasses import replace

from judge.language import tr
from judge.protocol import KataResult, Status, Tier

CONVENTIONS_HEAD = re.compile(r"^\s*Conventions\b.*:\s*$")


def core_only(result: KataResult) -> KataResult:
    """The verdict on the math alone: pass when every core test passes, whatever the
    conventions; the score over the core tests. Other verdicts (todo, error, timeout,
    crash, forbidden) stand as they are."""
    core = result.tiers.get(Tier.CORE.value)
    if result.status not in (Status.PASS, Status.FAIL) or not core or not core["total"]:
        return result
    passed, total = core["passed"], core["total"]
    failures = [f for f in result.failures if f.get("tier") != Tier.CONVENTIONS.value]
    if passed == total:
        message = tr("the math is right: {passed}/{total} core tests pass", passed=passed, total=total)
        return replace(
            result,
            status=Status.PASS,
            score=1.0,
            passed=passed,
            total=total,
            failures=[],
            message=message,
            diagnosis=[],
        )
    return replace(result, score=passed / total, passed=passed, total=total, failures=failures)


def stub_conventions(stub: str) -> list[str]:
    """The items of the stub docstring's "Conventions" block, one line each."""
    items: list[str] = []
    inside, indent = False, None
    for line in stub.splitlines():
        if CONVENTIONS_HEAD.match(line):
            inside, indent = True, None
            continue
        if not inside:
            continue
        text = line.strip()
        if not text or text.startswith('"""'):
            inside = False
            continue
        if text.startswith("- "):
            items.append(text[2:])
            indent = len(line) - len(line.lstrip())
        elif items and indent is not None and len(line) - len(line.lstrip()) > indent:
            items[-1] += " " + text
        else:
            inside = False
    return items


def conventions_note(result: KataResult, stub: str) -> list[str]:
    """After an interview's verdict: what a production version would add (the stub's
    conventions), how many of them this file meets, and which it misses. Nothing for a
    verdict that judged no convention."""
    judged = result.tiers.get(Tier.CONVENTIONS.value)
    if result.status not in (Status.PASS, Status.FAIL) or not judged or not judged["total"]:
        return []
    items = stub_conventions(stub)
    facts = {"passed": judged["passed"], "total": judged["total"]}
    if items:
        lines = [
            tr(
                "a production version would add (not counted in an interview; "
                "{passed} of {total} convention tests pass):",
                **facts,
            ),
            *[f"  - {item}" for item in items],
        ]
    else:
        lines = [tr("conventions, not counted in an interview: {passed} of {total} tests pass", **facts)]
    missed = [f["name"] for f in result.failures if f.get("tier") == Tier.CONVENTIONS.value]
    if missed:
        lines.append(tr("missed here: {names}", names="; ".join(missed)))
    return lines

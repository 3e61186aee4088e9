"""An interview's grade: the math only (the core tier), as an interviewer grades it, and
after it the conventions a production version would add, with how this file fares on them.

The learner works from a bare stub (judge.bare); the tests are the kata's own, all of them,
so the conventions are judged too, just not counted.
"""

from __future__ import annotations

from dataclasses import replace

from judge.language import tr
from judge.protocol import KataResult, Status, Tier


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


def conventions_note(result: KataResult) -> list[str]:
    """After an interview's verdict: what a production version would add (the kata's
    convention tests, by title), how many of them this file meets, and each one's result.
    Nothing for a verdict that judged no convention."""
    judged = result.tiers.get(Tier.CONVENTIONS.value)
    if result.status not in (Status.PASS, Status.FAIL) or not judged or not judged["total"]:
        return []
    head = tr(
        "a production version would add (not counted in an interview; {passed} of {total} convention tests pass):",
        passed=judged["passed"],
        total=judged["total"],
    )
    return [head, *(f"  {'✓' if passed else '✗'} {title}" for title, passed in judged.get("titles", {}).items())]

"""From what a kata process wrote and how it ended, to a verdict.

Only the events' kinds and outcomes decide the status, never a message's wording. A pass
needs positive evidence: the process exited 0, reported every collected test, and every
judged test passed. Tests this machine cannot judge (a CUDA test without CUDA, a device
check that needs a GPU) are left out of the count and listed, never passed.
"""

from __future__ import annotations

import re

from judge.isolation import ATTACKED, ProcessEnd, exit_reason
from judge.language import tr
from judge.limits import Limits
from judge.protocol import (
    UNJUDGED,
    Collected,
    ErrorKind,
    Event,
    Finish,
    KataResult,
    Outcome,
    Status,
    TestReport,
    Tier,
    most_specific,
)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A text the kata had a hand in (a message, what it printed) with every terminal control
    character but newline and tab shown escaped (\x1b...): it cannot paint the table."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def classify(name: str, events: list[Event], end: ProcessEnd, tail: str, limits: Limits) -> KataResult:
    collected = next((e for e in events if isinstance(e, Collected)), None)
    reports: dict[str, TestReport] = {}
    for event in events:
        if isinstance(event, TestReport):
            reports.setdefault(event.nodeid, event)
    finish = next((e for e in events if isinstance(e, Finish)), None)
    finished, stopped = finish is not None, finish is not None and finish.stopped
    tests = collected.tests if collected else {}
    inconclusive = [r for r in reports.values() if r.outcome == Outcome.INCONCLUSIVE]
    judged = [r for r in reports.values() if r.outcome not in UNJUDGED]
    failures = [r for r in judged if r.outcome != Outcome.PASSED]
    total = len(tests) - len(inconclusive)
    passed = len(judged) - len(failures)
    unjudged = [
        {"name": test_name, "reason": reason}
        for test_name, reason in (collected.unavailable.values() if collected else [])
    ]
    unjudged += [{"name": r.name, "reason": r.message} for r in inconclusive]
    tiers = tier_counts(tests, collected.tiers if collected else {}, reports)

    def result(status: Status, message: str, internal: bool = False) -> KataResult:
        score = passed / total if total > 0 else 0.0
        records = [failure_record(f) for f in failures]
        diagnosis = most_specific([f.diagnosis for f in failures]) if status == Status.FAIL else []
        printed = next((r.output for r in reports.values() if r.output), "") or ""
        return KataResult(
            name,
            status,
            score,
            passed,
            total,
            printable(message),
            records,
            unjudged,
            diagnosis,
            printed=printable(printed),
            tiers=tiers,
            internal_error=internal,
        )

    def first(kind: ErrorKind) -> TestReport | None:
        return next((f for f in failures if f.kind == kind), None)

    running = next((tests[nodeid] for nodeid in tests if nodeid not in reports), None)
    during = tr(" during '{running}'", running=running) if running else ""
    if end.importing:
        limit = (
            tr("the per-test limit of {seconds:g} s", seconds=limits.test_timeout)
            if end.overran
            else tr("{seconds:g} s", seconds=limits.time_limit)
        )
        return result(
            Status.TIMEOUT,
            tr(
                "importing {file} did not finish within {limit}: an endless loop (or a long computation) "
                "at the top level of the file, outside any function?",
                file=end.importing,
                limit=limit,
            ),
        )
    busy = (
        tr(" (the machine was busy: {seconds:.0f} s more spent waiting for a CPU did not count)", seconds=end.waited)
        if end.waited >= 1
        else ""
    )
    if end.timed_out:
        return result(
            Status.TIMEOUT,
            tr(
                "stopped after {seconds:g} s{during}: an endless loop, or far too slow?",
                seconds=limits.time_limit,
                during=during,
            )
            + busy,
        )
    if end.overran is not None:
        where = tests.get(end.overran, end.overran)
        return result(
            Status.TIMEOUT,
            tr(
                "'{where}' ran past the per-test limit of {seconds:g} s: an endless loop, or far too slow?",
                where=where,
                seconds=limits.test_timeout,
            )
            + busy,
        )
    if end.orphaned or end.returncode == ATTACKED:
        return result(
            Status.CRASH,
            tr(
                "the process watching over the kata was killed: a kata must not signal other "
                "processes (its parent, the grader)"
            ),
        )
    if load_error := first(ErrorKind.LOAD):
        return result(Status.ERROR, load_error.message)
    if forbidden := first(ErrorKind.FORBIDDEN):
        return result(Status.FORBIDDEN, forbidden.message)
    if deadlock := first(ErrorKind.DEADLOCK):
        return result(Status.TIMEOUT, f"{deadlock.name}: {deadlock.message}")
    if collected is None:
        if finished:
            return result(Status.ERROR, f"the tests of {name} could not be collected (a grader bug): {tail}", True)
        return result(
            Status.CRASH,
            tr(
                "the test process died before running any test ({reason}): {tail}",
                reason=exit_reason(end.returncode),
                tail=tail,
            ),
        )
    if not finished or (len(reports) < len(tests) and not stopped):
        return result(
            Status.CRASH,
            tr("the test process died{during} ({reason})", during=during, reason=exit_reason(end.returncode))
            + (f": {tail}" if tail else ""),
        )
    if flood := first(ErrorKind.OUTPUT_LIMIT):
        return result(
            Status.FAIL,
            tr(
                "{name}: the kata printed more than {mb} MB of output; print less",
                name=flood.name,
                mb=limits.output_mb,
            ),
        )
    if memory := first(ErrorKind.OUT_OF_MEMORY):
        return result(
            Status.ERROR,
            tr(
                "{name}: ran out of memory (limit {mb} MB; is a tensor far too large?): {message}",
                name=memory.name,
                mb=limits.memory_mb,
                message=memory.message[:200],
            ),
        )
    if total > 0 and not failures and end.returncode == 0:
        return result(Status.PASS, tr("all {total} tests passed", total=total))
    if passed == 0 and failures and all(f.kind == ErrorKind.NOT_IMPLEMENTED for f in failures):
        return result(Status.TODO, tr("not started: the stub still raises NotImplementedError"))
    if not failures:  # every judged test passed, yet pytest said otherwise, or nothing was judged
        reason = (
            "no test could be judged on this machine"
            if total <= 0
            else f"pytest exited with status {end.returncode} although no test failed"
        )
        return result(Status.ERROR, f"{reason}: {tail}", True)
    head = failures[0]
    core, conventions = tiers[Tier.CORE], tiers[Tier.CONVENTIONS]
    if core["total"] and core["passed"] == core["total"]:
        missed = conventions["total"] - conventions["passed"]
        facts = {"passed": core["passed"], "total": core["total"], "name": head.name, "message": head.message}
        if missed == 1:
            return result(
                Status.FAIL,
                tr("the math is right ({passed}/{total} core); 1 convention missed: {name}: {message}", **facts),
            )
        return result(
            Status.FAIL,
            tr(
                "the math is right ({passed}/{total} core); {missed} conventions missed; first: {name}: {message}",
                missed=missed,
                **facts,
            ),
        )
    return result(
        Status.FAIL,
        tr(
            "{failed} of {total} tests failed ({core_failed} of {core_total} core: the math is wrong); "
            "first: {name}: {message}",
            failed=len(failures),
            total=total,
            core_failed=core["total"] - core["passed"],
            core_total=core["total"],
            name=head.name,
            message=head.message,
        ),
    )


def tier_counts(tests: dict[str, str], tiers: dict[str, str], reports: dict[str, TestReport]) -> dict:
    """{tier: {"passed", "total", "titles"}} over the judged tests (an undeclared tier counts as
    core); "titles": {a test's title without its parameters: whether each of its runs passed}."""
    counts = {str(tier): {"passed": 0, "total": 0, "titles": {}} for tier in Tier}
    for nodeid, name in tests.items():
        report = reports.get(nodeid)
        if report is not None and report.outcome in UNJUDGED:
            continue
        count = counts[tiers.get(nodeid, Tier.CORE)]
        passed = report is not None and report.outcome == Outcome.PASSED
        count["total"] += 1
        count["passed"] += passed
        title = name.split(" [")[0]
        count["titles"][title] = count["titles"].get(title, True) and passed
    return counts


def failure_record(report: TestReport) -> dict:
    """A failed test as the JSON report lists it."""
    record = {"name": report.name, "outcome": str(report.outcome), "kind": report.kind and str(report.kind)}
    record["tier"] = report.tier
    record |= {"error": report.error, "message": printable(report.message)}
    if report.output:
        record["output"] = printable(report.output)
    if report.diagnosis:
        record["diagnosis"] = report.diagnosis
    return record

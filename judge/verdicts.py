"""From what a kata process wrote and how it ended, to a verdict.

Only the events' kinds and outcomes decide the status, never a message's wording. A pass
needs positive evidence: the process exited 0, reported every collected test, and every
judged test passed. Tests this machine cannot judge (a CUDA test without CUDA, a device
check that needs a GPU) are left out of the count and listed, never passed.
"""

from __future__ import annotations

from judge.isolation import ProcessEnd, exit_reason
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
    most_specific,
)


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
            message,
            records,
            unjudged,
            diagnosis,
            printed=printed,
            internal_error=internal,
        )

    def first(kind: ErrorKind) -> TestReport | None:
        return next((f for f in failures if f.kind == kind), None)

    running = next((tests[nodeid] for nodeid in tests if nodeid not in reports), None)
    during = f" during '{running}'" if running else ""
    if end.importing:
        limit = f"the per-test limit of {limits.test_timeout:g} s" if end.overran else f"{limits.time_limit:g} s"
        return result(
            Status.TIMEOUT,
            f"importing {end.importing} did not finish within {limit}: an endless loop (or a long computation) "
            "at the top level of the file, outside any function?",
        )
    if end.timed_out:
        return result(
            Status.TIMEOUT,
            f"stopped after {limits.time_limit:g} s of wall-clock time{during}: an endless loop, or far too slow?",
        )
    if end.overran is not None:
        where = tests.get(end.overran, end.overran)
        return result(
            Status.TIMEOUT,
            f"'{where}' ran past the per-test limit of {limits.test_timeout:g} s: an endless loop, or far too slow?",
        )
    if load_error := first(ErrorKind.LOAD):
        return result(Status.ERROR, load_error.message)
    if forbidden := first(ErrorKind.FORBIDDEN):
        return result(Status.FORBIDDEN, forbidden.message)
    if collected is None:
        if finished:
            return result(Status.ERROR, f"the tests of {name} could not be collected (a grader bug): {tail}", True)
        return result(
            Status.CRASH, f"the test process died before running any test ({exit_reason(end.returncode)}): {tail}"
        )
    if not finished or (len(reports) < len(tests) and not stopped):
        return result(
            Status.CRASH,
            f"the test process died{during} ({exit_reason(end.returncode)})" + (f": {tail}" if tail else ""),
        )
    if flood := first(ErrorKind.OUTPUT_LIMIT):
        return result(
            Status.FAIL, f"{flood.name}: the kata printed more than {limits.output_mb} MB of output; print less"
        )
    if memory := first(ErrorKind.OUT_OF_MEMORY):
        return result(
            Status.ERROR,
            f"{memory.name}: ran out of memory (limit {limits.memory_mb} MB; is a tensor far too large?): {memory.message[:200]}",
        )
    if total > 0 and not failures and end.returncode == 0:
        return result(Status.PASS, f"all {total} tests passed")
    if passed == 0 and failures and all(f.kind == ErrorKind.NOT_IMPLEMENTED for f in failures):
        return result(Status.TODO, "not started: the stub still raises NotImplementedError")
    if not failures:  # every judged test passed, yet pytest said otherwise, or nothing was judged
        reason = (
            "no test could be judged on this machine"
            if total <= 0
            else f"pytest exited with status {end.returncode} although no test failed"
        )
        return result(Status.ERROR, f"{reason}: {tail}", True)
    head = failures[0]
    return result(Status.FAIL, f"{len(failures)} of {total} tests failed; first: {head.name}: {head.message}")


def failure_record(report: TestReport) -> dict:
    """A failed test as the JSON report lists it."""
    record = {"name": report.name, "outcome": str(report.outcome), "kind": report.kind and str(report.kind)}
    record |= {"error": report.error, "message": report.message}
    if report.output:
        record["output"] = report.output
    if report.diagnosis:
        record["diagnosis"] = report.diagnosis
    return record

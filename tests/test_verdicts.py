"""verdicts.classify: a verdict from events and how the process ended, never from wording."""

from judge.isolation import ProcessEnd
from judge.limits import Limits
from judge.protocol import Collected, ErrorKind, Finish, Outcome, TestReport
from judge.verdicts import classify

LIMITS = Limits()
TWO = Collected(tests={"t1": "first", "t2": "second"})


def report(nodeid: str, outcome: Outcome, kind: ErrorKind | None = None, message: str = "") -> TestReport:
    return TestReport(nodeid=nodeid, name=nodeid, outcome=outcome, kind=kind, message=message)


PASSED = [report("t1", Outcome.PASSED), report("t2", Outcome.PASSED)]


def test_a_pass_needs_positive_evidence():
    """Every collected test reported and passed, and exit status 0: nothing less."""
    assert classify("k", [TWO, *PASSED, Finish(exitstatus=0)], ProcessEnd(0), "", LIMITS).status == "pass"
    assert classify("k", [TWO, *PASSED, Finish(exitstatus=0)], ProcessEnd(1), "", LIMITS).status != "pass"
    assert classify("k", [TWO, PASSED[0], Finish(exitstatus=0)], ProcessEnd(0), "", LIMITS).status == "crash"
    assert classify("k", [TWO, *PASSED], ProcessEnd(0), "", LIMITS).status == "crash"  # no Finish
    nothing = [Collected(tests={}), Finish(exitstatus=5)]
    assert classify("k", nothing, ProcessEnd(5), "", LIMITS).status != "pass"


def test_a_skip_raised_at_run_time_is_not_a_pass_whatever_it_says():
    """Hole 1: only the plugin leaves a case out (before any kata code loads), never a skip."""
    skipped = report("t2", Outcome.SKIPPED, message="CUDA is not available")
    verdict = classify("k", [TWO, PASSED[0], skipped, Finish(exitstatus=0)], ProcessEnd(0), "", LIMITS)
    assert (verdict.status, verdict.passed, verdict.total) == ("fail", 1, 2)


def test_cases_this_machine_cannot_judge_are_listed_not_counted():
    """Hole 2: an unavailable (CUDA) or inconclusive (meta device) case is neither passed nor failed."""
    collected = Collected(
        tests={"t1": "first", "t2": "second"}, unavailable={"t3": ["third [cuda]", "CUDA is not available"]}
    )
    inconclusive = report("t2", Outcome.INCONCLUSIVE, message="device handling not checked without a GPU")
    verdict = classify("k", [collected, PASSED[0], inconclusive, Finish(exitstatus=0)], ProcessEnd(0), "", LIMITS)
    assert (verdict.status, verdict.passed, verdict.total, verdict.score) == ("pass", 1, 1, 1.0)
    assert [u["reason"] for u in verdict.unjudged] == [
        "CUDA is not available",
        "device handling not checked without a GPU",
    ]


def test_the_stub_is_todo_and_anything_else_with_a_failure_is_not():
    todo = report("t1", Outcome.FAILED, ErrorKind.NOT_IMPLEMENTED)
    events = [TWO, todo, report("t2", Outcome.FAILED, ErrorKind.NOT_IMPLEMENTED), Finish(exitstatus=1)]
    assert classify("k", events, ProcessEnd(1), "", LIMITS).status == "todo"
    events = [TWO, todo, report("t2", Outcome.FAILED, ErrorKind.MISMATCH, "wrong"), Finish(exitstatus=1)]
    assert classify("k", events, ProcessEnd(1), "", LIMITS).status == "fail"


def test_the_kind_of_a_failure_decides_the_status_not_its_words():
    def status(kind: ErrorKind, message: str) -> str:
        events = [TWO, report("t1", Outcome.FAILED, kind, message), PASSED[1], Finish(exitstatus=1)]
        return classify("k", events, ProcessEnd(1), "", LIMITS).status

    assert status(ErrorKind.FORBIDDEN, "anything") == "forbidden"
    assert status(ErrorKind.LOAD, "anything") == "error"
    assert status(ErrorKind.OUT_OF_MEMORY, "anything") == "error"
    assert status(ErrorKind.OUTPUT_LIMIT, "anything") == "fail"
    assert status(ErrorKind.MISMATCH, "File too large; Timeout; can't allocate memory") == "fail"


def test_limits_end_a_kata_as_timeout():
    began = [TWO, PASSED[0]]
    wall = classify("k", began, ProcessEnd(None, timed_out=True), "", LIMITS)
    assert (wall.status, "during 'second'" in wall.message) == ("timeout", True)
    overran = classify("k", began, ProcessEnd(None, overran="t2"), "", LIMITS)
    assert (overran.status, "'second' ran past the per-test limit" in overran.message) == ("timeout", True)


def test_a_run_asked_to_stop_at_its_first_failure_is_a_fail_not_a_crash():
    failed = report("t1", Outcome.FAILED, ErrorKind.MISMATCH, "wrong")
    verdict = classify("k", [TWO, failed, Finish(exitstatus=1, stopped=True)], ProcessEnd(1), "", LIMITS)
    assert verdict.status == "fail"
    assert classify("k", [TWO, failed, Finish(exitstatus=1)], ProcessEnd(1), "", LIMITS).status == "crash"

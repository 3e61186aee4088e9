"""What crosses from a kata's process to the grader, and what the grader reports.

The kata process (judge.plugin) appends one JSON line per event to a results file that
the grader owns: the kata's own output never reaches it, so printing cannot forge a
result. This module defines the events, the one writer and the one reader, and the
vocabulary both sides share: a test's Outcome, a failure's ErrorKind, a kata's Status.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import ClassVar


class Status(StrEnum):
    """A kata's verdict."""

    PASS = "pass"  # every judged test passed
    FAIL = "fail"  # some test failed
    TODO = "todo"  # not started: every failure is the stub's NotImplementedError
    ERROR = "error"  # the file does not import, lacks its symbol, or ran out of memory
    TIMEOUT = "timeout"  # past the wall-clock limit, or one test past the per-test limit
    CRASH = "crash"  # the process died before reporting every test
    FORBIDDEN = "forbidden"  # called what the kata asks you to write


class Outcome(StrEnum):
    """One test's outcome."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # skipped at run time (never by the grader): not a pass
    INCONCLUSIVE = "inconclusive"  # a check this machine cannot decide: not judged, and said so
    UNAVAILABLE = "unavailable"  # needs a device this machine lacks: not run, not judged, and said so


UNJUDGED = (Outcome.INCONCLUSIVE, Outcome.UNAVAILABLE)


class Tier(StrEnum):
    """What a test judges (judge.testing.tiers): the math, or a convention the docstring states."""

    CORE = "core"
    CONVENTIONS = "conventions"


class ErrorKind(StrEnum):
    """Why a test failed, decided in the kata process from the exception itself."""

    MISMATCH = "mismatch"  # the test's own check: a wrong result, with a message that says how
    NOT_IMPLEMENTED = "not_implemented"  # the stub's raise NotImplementedError
    LOAD = "load"  # the kata file did not import, or lacks its public symbol
    FORBIDDEN = "forbidden"  # a forbidden call
    STATE = "state"  # the kata changed torch's global state and left it so
    THREAD_LEFT_RUNNING = "thread_left_running"  # a thread the kata started outlived its call
    OUT_OF_MEMORY = "out_of_memory"  # the memory limit
    OUTPUT_LIMIT = "output_limit"  # wrote more than the output limit (a print flood)
    SIGNATURE = "signature"  # the call did not even bind: the kata's signature differs
    DEADLOCK = "deadlock"  # the ranks of a world all waited for each other (judge.worlds)
    RAISED = "raised"  # any other exception the kata's code raised


# Failures that say the file is out of step with the kata (a renamed argument, a missing
# import) rather than wrong: a mutant failing only with these is stale, not rejected.
STALE_ERRORS = ("NameError", "UnboundLocalError", "ImportError", "ModuleNotFoundError")


# How a diagnosis names known slips (judge.testing.diagnosis writes them, verdicts choose).
SINGLE, SEVERAL = "looks like: ", "looks like one of: "
# Failures diagnosed per run, at most (judge.testing.diagnosis stops at the first that names a
# single slip): also how far a grade that stops early goes past failures that name several.
DIAGNOSED_FAILURES = 3


def most_specific(diagnoses: list[list[str]]) -> list[str]:
    """Of several failures' diagnoses, the first that names a single slip, else the first at all."""
    return next((d for d in diagnoses if d and d[0].startswith(SINGLE)), next((d for d in diagnoses if d), []))


def is_stale_failure(failure: dict) -> bool:
    return failure.get("kind") == ErrorKind.SIGNATURE or failure.get("error") in STALE_ERRORS


# --------------------------------------------------------------------------- events


@dataclass
class Event:
    tag: ClassVar[str] = ""

    def to_line(self) -> str:
        return json.dumps({"event": self.tag, **asdict(self)}) + "\n"


@dataclass
class Start(Event):
    """The kata process is up and has read its options."""

    tag: ClassVar[str] = "start"
    seed: int
    pid: int


@dataclass
class Collected(Event):
    """The tests that will run, in order (nodeid -> readable name), and those that will not
    because this machine cannot run them (nodeid -> name and reason)."""

    tag: ClassVar[str] = "collected"
    tests: dict[str, str]
    unavailable: dict[str, list[str]] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)  # nodeid -> "core" or "conventions" (judge.testing.tiers)


@dataclass
class Begin(Event):
    """A test starts: the grader's per-test clock starts when it sees this. `importing`: the kata
    file being imported for this test (its top-level code runs); a Begin without it follows the
    import, and restarts the clock for the test itself."""

    tag: ClassVar[str] = "begin"
    nodeid: str
    importing: str | None = None
    pids: list[int] = field(default_factory=list)  # the processes working on it (judge, fork server, kata)


PRINTED_CUT = " ..."  # ends a TestReport's output when the kata printed more than it keeps


@dataclass
class TestReport(Event):
    """A test's outcome; for a failure its kind, the exception type and a readable message."""

    tag: ClassVar[str] = "test"
    __test__: ClassVar[bool] = False  # not a pytest test class
    nodeid: str
    name: str
    outcome: Outcome
    kind: ErrorKind | None = None
    error: str | None = None
    message: str = ""
    output: str | None = None  # what the kata printed during the test, truncated
    diagnosis: list[str] = field(default_factory=list)  # which slip it looks like, what pattern it shows
    tier: str | None = None  # "core" or "conventions"


@dataclass
class Finish(Event):
    """pytest's exit status; written last. stopped: the run stopped early, as asked (--maxfail,
    for mutants: plugin.stop_early): the tests after its last failure did not run."""

    tag: ClassVar[str] = "finish"
    exitstatus: int
    stopped: bool = False


@dataclass
class Timing(Event):
    """Timing mode: the kata against its reference, per device."""

    tag: ClassVar[str] = "timing"
    timing: dict


EVENTS = {kind.tag: kind for kind in (Start, Collected, Begin, TestReport, Finish, Timing)}


class EventWriter:
    """Appends events to the results file, flushed one by one: a crash or a kill still
    leaves every event written so far."""

    def __init__(self, path: Path):
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, event: Event) -> None:
        self.file.write(event.to_line())
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def parse_event(line: str) -> Event | None:
    """One line back into its event; None for a line cut short or not ours."""
    try:
        data = json.loads(line)
        kind = EVENTS[data.pop("event")]
        names = {f.name for f in fields(kind)}
        event = kind(**{k: v for k, v in data.items() if k in names})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if isinstance(event, TestReport):
        event.outcome = Outcome(event.outcome)
        event.kind = ErrorKind(event.kind) if event.kind else None
    return event


def read_events(path: Path) -> list[Event]:
    """Every whole event in the file, in order; reading stops at a line cut short by a kill."""
    events: list[Event] = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return events
    for line in text.splitlines():
        event = parse_event(line)
        if event is None:
            break
        events.append(event)
    return events


class EventTail:
    """Reads the events appended to a file since the last call (the grader's watch on a
    running kata, for the per-test limit)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def new_events(self) -> list[Event]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as file:
                file.seek(self.offset)
                chunk = file.read()
                self.offset = file.tell()
        except OSError:
            return []
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        return [event for event in map(parse_event, lines) if event is not None]


# --------------------------------------------------------------------------- the verdict


@dataclass
class KataResult:
    """A kata's verdict as the table and the JSON report show it.

    score: the fraction of its judged tests that passed (0..1); passed/total count the
    judged tests only. unjudged: tests this machine could not judge (a CUDA test without
    CUDA, a device check without a GPU), each {"name", "reason"}; never counted.
    diagnosis: what the first diagnosed failure looks like (a known slip, a pattern).
    tiers: {"core": {"passed", "total"}, "conventions": {"passed", "total"}}, judged tests only.
    printed: what the kata printed in the first test where it printed (truncated); shown with
    advice to remove it, never counted against the kata."""

    name: str
    status: Status
    score: float
    passed: int
    total: int
    message: str
    failures: list[dict] = field(default_factory=list)
    unjudged: list[dict] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)
    timing: dict = field(default_factory=dict)
    printed: str = ""
    tiers: dict = field(default_factory=dict)
    internal_error: bool = False  # the grader, not the kata, is at fault (exit status 2)

    def to_json(self, *, internal: bool = False) -> dict:
        data = asdict(self)
        data["status"] = str(self.status)
        if not internal:
            del data["internal_error"]
        return data

    @classmethod
    def from_json(cls, data: dict) -> KataResult:
        return cls(**{**data, "status": Status(data["status"])})

"""The kind of a failure, decided from the exception itself and where it was raised: in the
judging process for its own checks, in the kata process for what the kata's code raised."""

from __future__ import annotations

import errno

from judge.language import tr
from judge.protocol import ErrorKind


class ThreadLeftRunning(Exception):
    """The kata left a thread running after a test: work out of the grader's sight."""


def error_kind(error: BaseException, frames: list[int | None]) -> ErrorKind:
    """The kind of a failure, from the exception itself and where it was raised."""
    names = [cls.__name__ for cls in type(error).__mro__]
    return kind_of(names, str(error), getattr(error, "errno", None), frames)


def kind_of(names: list[str], message: str, errno_: int | None, frames: list[int | None]) -> ErrorKind:
    """The kind of a failure from the facts about it: its class's and base classes' names,
    its message and errno, and for each frame of its traceback the kata file's line (None for
    code elsewhere). Decided here, in the judging process, from what the kata process reports:
    no kind is taken from it."""
    from_kata = any(line is not None for line in frames)
    if "KataLoadError" in names:
        return ErrorKind.LOAD
    if "ForbiddenCallError" in names:
        return ErrorKind.FORBIDDEN
    if "TorchStateChanged" in names:
        return ErrorKind.STATE
    if "ThreadLeftRunning" in names:
        return ErrorKind.THREAD_LEFT_RUNNING
    if "WorldDeadlock" in names:
        return ErrorKind.DEADLOCK
    if "NotImplementedError" in names and frames and frames[-1] is not None:  # the kata raised it itself
        return ErrorKind.NOT_IMPLEMENTED
    if "AssertionError" in names:
        return ErrorKind.MISMATCH
    if (
        "MemoryError" in names
        or "OutOfMemoryError" in names
        or (
            "RuntimeError" in names and "can't allocate memory" in message  # c10's CPU allocator
        )
    ):
        return ErrorKind.OUT_OF_MEMORY
    if "OSError" in names and errno_ == errno.EFBIG:
        return ErrorKind.OUTPUT_LIMIT
    if "TypeError" in names and not from_kata:
        return ErrorKind.SIGNATURE
    return ErrorKind.RAISED


# Failures whose message is written to be read as is; the others read "Type: message".
READ_AS_IS = (
    ErrorKind.MISMATCH,
    ErrorKind.LOAD,
    ErrorKind.FORBIDDEN,
    ErrorKind.STATE,
    ErrorKind.THREAD_LEFT_RUNNING,
    ErrorKind.DEADLOCK,
)


def failure_text(kind: ErrorKind, name: str, message: str, where: str = "") -> str:
    """The message the learner reads; `where` (" (raised at kata.py, line 12)") is added to
    an exception the kata raised."""
    if kind in READ_AS_IS:
        return message
    text = f"{name}: {message}".rstrip(": ") + where
    if "can't start new thread" in message:  # the sandbox refused it (judge/sandbox.py)
        text += tr(
            "; this kata's process may start no thread: the judge traces its calls, or autograd is "
            "removed there, and a thread would be out of sight of both"
        )
    return text

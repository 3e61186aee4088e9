"""The kind of a failure, decided from the exception itself and where it was raised: in the
judging process for its own checks, in the kata process for what the kata's code raised."""

from __future__ import annotations

import errno

import torch

from judge.forbidden import ForbiddenCallError
from judge.loading import KataLoadError, TorchStateChanged
from judge.protocol import ErrorKind


class ThreadLeftRunning(Exception):
    """The kata left a thread running after a test: work out of the grader's sight."""


def error_kind(error: BaseException, frames: list[int | None]) -> ErrorKind:
    """The kind of a failure, from the exception itself and where it was raised."""
    from_kata = any(line is not None for line in frames)
    if isinstance(error, KataLoadError):
        return ErrorKind.LOAD
    if isinstance(error, ForbiddenCallError):
        return ErrorKind.FORBIDDEN
    if isinstance(error, TorchStateChanged):
        return ErrorKind.STATE
    if isinstance(error, ThreadLeftRunning):
        return ErrorKind.THREAD_LEFT_RUNNING
    if isinstance(error, NotImplementedError) and frames and frames[-1] is not None:  # the kata raised it itself
        return ErrorKind.NOT_IMPLEMENTED
    if isinstance(error, AssertionError):
        return ErrorKind.MISMATCH
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)  # c10's CPU allocator
    ):
        return ErrorKind.OUT_OF_MEMORY
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return ErrorKind.OUTPUT_LIMIT
    if isinstance(error, TypeError) and not from_kata:
        return ErrorKind.SIGNATURE
    return ErrorKind.RAISED


# Failures whose message is written to be read as is; the others read "Type: message".
READ_AS_IS = (
    ErrorKind.MISMATCH,
    ErrorKind.LOAD,
    ErrorKind.FORBIDDEN,
    ErrorKind.STATE,
    ErrorKind.THREAD_LEFT_RUNNING,
)


def failure_text(kind: ErrorKind, name: str, message: str, where: str = "") -> str:
    """The message the learner reads; `where` (" (raised at kata.py, line 12)") is added to
    an exception the kata raised."""
    if kind in READ_AS_IS:
        return message
    return f"{name}: {message}".rstrip(": ") + where

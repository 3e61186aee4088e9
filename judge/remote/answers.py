"""What a kata process (or a rank of a world) sends back, and how the judge reads it: a
scenario's result as data, an exception as its facts, and those facts raised again as the
judge's exception. One module below the kata process's server, the judge's client and the
worlds (judge/worlds.py), so each of them reads and writes answers the same way."""

from __future__ import annotations

import builtins
import traceback
from pathlib import Path

import torch

from judge.failures import failure_text, kind_of
from judge.forbidden import ForbiddenCallError
from judge.loading import KataLoadError, TorchStateChanged
from judge.remote.wire import opaque, tagged

PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size, slice)


def as_data(value, depth: int = 0):
    """A scenario's result as data: any other object becomes an opaque stand-in that names its type."""
    if isinstance(value, (torch.Tensor, *PLAIN)) or value is Ellipsis:
        return value
    if depth < 32 and isinstance(value, (tuple, list)):
        items = [as_data(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if depth < 32 and isinstance(value, dict):
        return {k if isinstance(k, (str, int)) else repr(k): as_data(v, depth + 1) for k, v in value.items()}
    return opaque(value)


def error_facts(error: BaseException, kata_file: str) -> dict:
    """The facts of an exception, for the judge to decide its kind: its class's and base
    classes' names, message, errno, and the kata file's line of each frame (or None)."""
    frames = [
        entry.lineno if entry.filename == kata_file else None for entry in traceback.extract_tb(error.__traceback__)
    ]
    errno_ = getattr(error, "errno", None)
    return tagged(
        "error",
        names=[cls.__name__ for cls in type(error).__mro__],
        message=str(error),
        errno=errno_ if isinstance(errno_, int) else None,
        frames=frames,
        file=Path(kata_file).name,
    )


_BUILTIN_ERRORS = {
    name: value for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Exception)
}
_JUDGE_ERRORS = {
    "ForbiddenCallError": ForbiddenCallError,
    "KataLoadError": KataLoadError,
    "TorchStateChanged": TorchStateChanged,
    "OutOfMemoryError": torch.OutOfMemoryError,
}


def rebuild_error(answer: dict) -> BaseException:
    """The kata's exception as the judge raises it, from the facts the kata process sent (see
    KataServer.error): its kind decided here (failures.kind_of); the same class where it is a
    builtin (so `except ValueError` works) or one of the judge's few, else a RuntimeError of
    its name; `kata_error` carries the kind and the message the learner reads."""
    names, message = [str(n) for n in answer["names"]] or ["Exception"], str(answer["message"])
    frames = [line if isinstance(line, int) else None for line in answer["frames"]]
    kind = kind_of(names, message, answer["errno"], frames)
    lines = [line for line in frames if line is not None]
    where = f" (raised at {answer['file']}, line {lines[-1]})" if lines else ""
    name = names[0]
    cls = _JUDGE_ERRORS.get(name) or _BUILTIN_ERRORS.get(name)
    try:
        errno_ = answer["errno"]
        error = cls(errno_, message) if errno_ is not None and issubclass(cls, OSError) else cls(message)
    except Exception:  # noqa: BLE001 - no such class, or one with another signature
        error = type(name, (RuntimeError,), {"__module__": "kata"})(message)
    error.kata_error = (kind, name, failure_text(kind, name, message, where))
    return error

"""Checks whose failure messages say what was called, what came back and what was expected."""

from __future__ import annotations

import re

import pytest
import torch

from judge.language import tr, tr_data
from judge.testing.tolerances import SINGLE_OP

MESSAGE_LIMIT = 600  # characters of a value's repr kept in a failure message


def label(what: str) -> str:
    """What a message calls a compared value: an output's name as it is in the code; a
    description (a key the tests share across processes, so English in the data) in the
    learner's language: by pattern, or as a fixed text (tr_data)."""
    if match := re.fullmatch(r"(?:the )?gradient of `?([^`]+)`?", what):
        return tr("the gradient of `{name}`", name=match[1])
    if match := re.fullmatch(r"the RMS of (\S+)", what):
        return tr("the RMS of {name}", name=match[1])
    if match := re.fullmatch(r"(.+) on rank (\d+)", what):  # a distributed kata's result, rank by rank
        return tr("{what} on rank {rank}", what=label(match[1]), rank=match[2])
    return tr_data(what)


class Mismatch(AssertionError):
    """A result that differs from the expected one. Besides its message it keeps what it is
    ("weights", "output"), both values and how they are compared (a tolerance dict, or None
    for exact), so the diagnosis can tell which known slip gives the same wrong result.
    `kind_only`: the type, shape, dtype or device differ (values were never compared).
    `project` maps another implementation's raw result onto what was compared (the
    undefined rows blanked, say)."""

    def __init__(self, message: str, *, what: str, actual, expected, tolerance=None, kind_only=False, project=None):
        super().__init__(message)
        self.what, self.actual, self.expected, self.tolerance = what, actual, expected, tolerance
        self.kind_only, self.project = kind_only, project or (lambda value: value)


def describe(value) -> str:
    """A short description of an argument: tensors as dtype[shape], the rest as repr."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        device = "" if value.device.type == "cpu" else tr(" on {device}", device=value.device)
        return f"{dtype}{list(value.shape)}{device}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def call_repr(name: str, *args, **kwargs) -> str:
    """How a call looked, e.g. `f(float32[2, 3], is_causal=True)`."""
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ..."


def check_tensor_kind(actual, expected: torch.Tensor, *, call: str, what: str) -> None:
    """Type, shape, dtype and device, each with its own message, before any value."""

    def mismatch(message: str) -> Mismatch:
        return Mismatch(message, what=what, actual=actual, expected=expected, kind_only=True)

    if not isinstance(actual, torch.Tensor):
        kind = type(actual).__name__
        raise mismatch(
            tr(
                "{call} returned {what} of type {kind}, expected a tensor: {value}",
                call=call,
                what=label(what),
                kind=kind,
                value=_short(actual),
            )
        )
    if (actual.shape, actual.dtype, actual.device) == (expected.shape, expected.dtype, expected.device):
        return  # the common case: no message to word
    facts = {"call": call, "what": label(what)}
    if actual.shape != expected.shape:
        raise mismatch(
            tr(
                "{call} returned {what} of shape {got}, expected {want}",
                **facts,
                got=list(actual.shape),
                want=list(expected.shape),
            )
        )
    if actual.dtype != expected.dtype:
        raise mismatch(
            tr("{call} returned {what} of dtype {got}, expected {want}", **facts, got=actual.dtype, want=expected.dtype)
        )
    if actual.device != expected.device:
        raise mismatch(
            tr(
                "{call} returned {what} on device {got}, expected {want}",
                **facts,
                got=actual.device,
                want=expected.device,
            )
        )


def _index(flat_index: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape))) if shape else ()


def assert_close(
    actual,
    expected: torch.Tensor,
    *,
    call: str,
    what: str = "result",
    tolerance: dict | None = None,
    project=None,
    hint: str = "",
) -> None:
    """Compare a float result with the reference within `tolerance` ({"rtol", "atol"}; by
    default SINGLE_OP's for the expected dtype).

    The message names the call, the worst element (index, got, expected) and how many
    elements are off; NaN and Inf are named as such; `hint`, a sentence, ends it (what such
    a mismatch most often means). The Mismatch stays itself, for the diagnosis."""
    try:
        _compare(actual, expected, call=call, what=what, tolerance=tolerance, project=project)
    except AssertionError as error:
        if hint:
            error.args = (tr("{message}. {hint}", message=error, hint=hint),)
        raise


def _compare(actual, expected: torch.Tensor, *, call: str, what: str, tolerance: dict | None, project) -> None:
    check_tensor_kind(actual, expected, call=call, what=what)
    tolerance = tolerance or SINGLE_OP[expected.dtype]
    got, want = actual.detach().cpu().double(), expected.detach().cpu().double()

    def mismatch(message: str) -> Mismatch:
        return Mismatch(message, what=what, actual=actual, expected=expected, tolerance=tolerance, project=project)

    for bad, name in ((torch.isnan, "NaN"), (torch.isinf, "Inf")):
        wrong = bad(got) & ~bad(want)
        if wrong.any():
            where = _index(int(wrong.flatten().nonzero()[0]), got.shape)
            raise mismatch(
                tr(
                    "{call} returned {what} with {name} at index {where} ({count} of {total} elements); "
                    "expected {want}",
                    call=call,
                    what=label(what),
                    name=name,
                    where=where,
                    count=int(wrong.sum()),
                    total=wrong.numel(),
                    want=f"{want[where].item() + 0.0:.6g}",
                )
            )

    def message(_default: str) -> str:
        diff = torch.where(got == want, 0.0, (got - want).abs()).nan_to_num(nan=float("inf"))  # inf == inf: no error
        # the worst element is the one furthest outside what is allowed for it
        excess = diff / (tolerance["atol"] + tolerance["rtol"] * want.abs().nan_to_num(nan=0.0))
        worst = _index(int(excess.flatten().argmax()), got.shape)
        off = ~torch.isclose(got, want, **tolerance)
        shown_got, shown_want = distinct(got[worst].item(), want[worst].item())
        return tr(
            "{call} returned wrong {what}: {count} of {total} elements are off; the worst is at index {worst}: "
            "got {got}, expected {want}, off by {off} (allowed: {atol} + {rtol} * |expected|)",
            call=call,
            what=label(what),
            count=int(off.sum()),
            total=off.numel(),
            worst=worst,
            got=shown_got,
            want=shown_want,
            off=f"{diff[worst].item():.3g}",
            atol=f"{tolerance['atol']:g}",
            rtol=f"{tolerance['rtol']:g}",
        )

    try:
        torch.testing.assert_close(actual, expected, rtol=tolerance["rtol"], atol=tolerance["atol"], msg=message)
    except AssertionError as error:
        raise mismatch(str(error)) from None


def distinct(got: float, want: float) -> tuple[str, str]:
    """Two numbers with as many digits as it takes to tell them apart (9 at least, 17 at most)."""
    got, want = got + 0.0, want + 0.0  # -0.0 reads as 0: "expected -0" only puzzles
    for digits in range(9, 18):
        shown = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if shown[0] != shown[1] or got == want:
            return shown
    return shown


def _grid(mask: torch.Tensor) -> str:
    rows = mask.to(torch.int8).tolist()
    return "\n".join("    " + " ".join(str(v) for v in row) for row in rows)


def assert_equal_mask(actual, expected: torch.Tensor, *, call: str, what: str = "mask") -> None:
    """Compare boolean masks exactly; small 2-D masks are drawn in the message."""
    check_tensor_kind(actual, expected, call=call, what=what)
    wrong = actual.cpu() != expected.cpu()
    if wrong.any():
        where = _index(int(wrong.flatten().nonzero()[0]), expected.shape)
        text = tr(
            "{call} returned a wrong {what}: it differs at {count} of {total} positions; "
            "first at index {where}: got {got}, expected {want}",
            call=call,
            what=label(what),
            count=int(wrong.sum()),
            total=wrong.numel(),
            where=where,
            got=bool(actual[where]),
            want=bool(expected[where]),
        )
        if expected.dim() == 2 and expected.shape[0] <= 8 and expected.shape[1] <= 12:
            got, want = tr("  got (1 = True):"), tr("  expected:")
            text += f"\n{got}\n{_grid(actual.cpu())}\n{want}\n{_grid(expected.cpu())}"
        raise Mismatch(text, what=what, actual=actual, expected=expected)


def call_and_check_inputs(fn, call: str, **inputs):
    """Return fn(), after checking it left every named input tensor as it was.

    Run this before judging values: a kata that scales `query` in place would otherwise be
    told its output is wrong, which hides the real slip."""
    snapshots = {  # meta tensors have no values to compare
        name: tensor.clone()
        for name, tensor in inputs.items()
        if isinstance(tensor, torch.Tensor) and not tensor.is_meta
    }
    result = fn()
    for name, snapshot in snapshots.items():
        assert_not_modified(name, inputs[name], snapshot, call=call)
    return result


def assert_not_modified(name: str, argument: torch.Tensor, snapshot: torch.Tensor, *, call: str) -> None:
    """Inputs belong to the caller: a kata must not change them in place."""
    if not torch.equal(argument, snapshot):
        raise AssertionError(
            tr(
                "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op",
                call=call,
                name=name,
            )
        )


def assert_raises_value_error(build, *, call: str, reason: str) -> None:
    """build() must raise ValueError. NotImplementedError (an untouched stub) and the guard's
    refusals propagate as they are."""
    from judge.forbidden import ForbiddenCallError

    try:
        build()
    except ValueError:
        return
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the message names what was raised instead
        raise AssertionError(
            tr(
                "{call} raised {name}: {error}; expected {expected} ({reason})",
                call=call,
                name=type(error).__name__,
                error=error,
                expected="ValueError",
                reason=reason,
            )
        ) from None
    raise AssertionError(tr("{call} returned normally; expected ValueError ({reason})", call=call, reason=reason))


# --------------------------------------------------------------------------- devices


class Inconclusive(pytest.skip.Exception):
    """A check this machine cannot decide. The grader leaves the test out of the count and
    says so ("device handling not checked without a GPU"); it is never a pass."""


NO_GPU = "device handling not checked without a GPU: the kata reads tensor values in Python"

# What a kata sees on the "meta" device when it reads tensor values in Python (.tolist(),
# .item(), int(t)) or needs them to know a shape (boolean-mask indexing, which calls
# torch.nonzero): correct code on a real GPU, so such a device check is inconclusive.
META_DATA_ERRORS = (
    "Cannot copy out of meta tensor",
    "cannot be called on meta tensors",
    "torch.nonzero",
    "attempted to run this operator with Meta tensors",  # an aten op with no meta kernel (bincount)
)


def stand_in() -> str:
    """What a call on the meta device is said to be, in the learner's language."""
    return tr(" on the meta device (a stand-in for CUDA here)")


# Errors that say tensors of two devices were mixed: a real slip, raised on a GPU too.
DEVICE_MIXING = ("same device", "expected device", "found at least two devices", "on device cpu")
META_ONLY = (
    "device handling not checked without a GPU: on the meta device (the stand-in for CUDA here) "
    "the kata raised an error it does not raise on the CPU"
)


def judge_on_device(run, device: str, *, expected, compare) -> None:
    """Results follow the inputs' device. run(device, check) makes the learner's call on
    inputs made on `device` and calls check(call text, {what: value}) inside its diagnosis;
    expected(device) -> {what: tensor} (never asked for "meta": the CPU's, moved there).

    On a GPU every value is compared. Without one, "meta" stands in for CUDA: it has shapes,
    dtypes and devices but no values, so only those are judged, and each message names the
    stand-in. An error the kata raises on "meta" alone (reading a value, autocast, an op with
    no meta kernel) is the stand-in's limit, not the kata's: the same call is made on the
    CPU, and if it runs there the check is Inconclusive, never a fail; unless the error says
    two devices were mixed (a tensor made on the CPU meeting the inputs), which a GPU raises too."""

    def values(text: str, got: dict) -> None:
        for what, want in expected(device).items():
            compare(got[what], want, call=text, what=what)

    def kinds(text: str, got: dict) -> None:
        for what, want in expected("cpu").items():  # computed where there are values, then its kind on meta
            check_tensor_kind(got[what], want.to("meta"), call=text + stand_in(), what=what)

    if device != "meta":
        run(device, values)
        return
    try:
        run("meta", kinds)
    except Exception as error:  # noqa: BLE001 - the kata's own error on the stand-in
        from judge.protocol import ErrorKind

        kind, name, text = getattr(error, "kata_error", (None, "", ""))
        reads_values = kind == ErrorKind.NOT_IMPLEMENTED and any(words in text for words in META_DATA_ERRORS)
        if kind != ErrorKind.RAISED and not reads_values:
            raise
        if any(words in text.lower() for words in DEVICE_MIXING):
            error.kata_error = (kind, name, tr("{where}: {text}", where=stand_in().strip(), text=text))
            raise
        try:
            run("cpu", lambda text, got: None)
        except Exception:  # noqa: BLE001 - it fails on the CPU too: the kata's own failure
            raise error from None
        raise Inconclusive(NO_GPU if reads_values else META_ONLY) from None


def call_on_device(fn, device):
    """Call fn(). "meta" stands in for CUDA on machines without one: it shows whether results
    follow the inputs' device, but has no values. A kata that reads values in Python is fine
    on a GPU, so there the check raises Inconclusive instead of judging it."""
    try:
        return fn()
    except (NotImplementedError, RuntimeError) as error:
        if str(device) == "meta" and any(text in str(error) for text in META_DATA_ERRORS):
            raise Inconclusive(NO_GPU) from None
        raise

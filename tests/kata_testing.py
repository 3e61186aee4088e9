"""Helpers shared by the kata tests.

Loading the code under test, drawing hidden inputs, tolerances per dtype, and checks
whose failure messages say what was called, what came back and what was expected.
"""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

# (rtol, atol) for a result computed in the given dtype and compared with PyTorch's.
# float32/float64 are torch.testing's defaults. The half-precision ones are a few ulps
# (float16 ulp at 1.0 is 9.8e-4, bfloat16's 7.8e-3): a correct kata that rounds in
# another order than PyTorch lands within them; a wrong scale or mask does not.
TOLERANCES = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float16: {"rtol": 4e-3, "atol": 4e-3},
    torch.bfloat16: {"rtol": 3e-2, "atol": 3e-2},
}

MESSAGE_LIMIT = 600  # characters of a value's repr kept in a failure message


def dtypes(*choices: torch.dtype):
    """Parametrize a test over dtypes, with readable ids: [float32], [bfloat16]."""
    return pytest.mark.parametrize("dtype", choices, ids=lambda d: str(d).removeprefix("torch."))


class KataLoadError(Exception):
    """The file under test could not be imported or lacks the kata's public symbol."""


def load_kata(path: Path, symbol: str):
    """Import the kata file at `path` as a fresh module and return it.

    Raises KataLoadError with a one-line reason when the file is missing, fails to
    import (syntax error, exception at import time) or does not define `symbol`.
    """
    if not path.is_file():
        raise KataLoadError(f"no file {path}")
    module_name = f"kata_under_test_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise KataLoadError(f"{path}, line {error.lineno}: SyntaxError: {error.msg}") from None
    except BaseException as error:  # noqa: BLE001 - a kata may raise anything at import
        if isinstance(error, KeyboardInterrupt):
            raise
        raise KataLoadError(f"importing {path} raised {type(error).__name__}: {error}") from error
    if not hasattr(module, symbol):
        raise KataLoadError(f"{path} defines no `{symbol}`")
    return module


def describe(value) -> str:
    """A short description of an argument: tensors as dtype[shape], the rest as repr."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        device = "" if value.device.type == "cpu" else f" on {value.device}"
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
    if not isinstance(actual, torch.Tensor):
        raise AssertionError(
            f"{call} returned {what} of type {type(actual).__name__}, expected a tensor: {_short(actual)}"
        )
    if actual.shape != expected.shape:
        raise AssertionError(f"{call} returned {what} of shape {list(actual.shape)}, expected {list(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{call} returned {what} of dtype {actual.dtype}, expected {expected.dtype}")
    if actual.device != expected.device:
        raise AssertionError(f"{call} returned {what} on device {actual.device}, expected {expected.device}")


def _index(flat_index: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), tuple(shape))) if shape else ()


def assert_close(actual, expected: torch.Tensor, *, call: str, what: str = "result", tolerance=None) -> None:
    """Compare a float result with the reference, using explicit (rtol, atol).

    `tolerance` defaults to TOLERANCES[expected.dtype]. The message names the call, the
    worst element (index, got, expected) and how many elements are off.
    """
    check_tensor_kind(actual, expected, call=call, what=what)
    tolerance = tolerance or TOLERANCES[expected.dtype]
    got, want = actual.detach().cpu().double(), expected.detach().cpu().double()
    for bad, name in ((torch.isnan, "NaN"), (torch.isinf, "Inf")):
        wrong = bad(got) & ~bad(want)
        if wrong.any():
            where = _index(int(wrong.flatten().nonzero()[0]), got.shape)
            raise AssertionError(
                f"{call} returned {what} that contains {name} at index {where} "
                f"({int(wrong.sum())} of {wrong.numel()} elements); expected {want[where].item():.6g}"
            )

    def message(_default: str) -> str:
        diff = (got - want).abs().nan_to_num(nan=float("inf"))
        worst = _index(int(diff.flatten().argmax()), got.shape)
        off = ~torch.isclose(got, want, **tolerance)
        return (
            f"{call} returned wrong {what}: {int(off.sum())} of {off.numel()} "
            f"elements are off; the worst is at index {worst}: got {got[worst].item():.9g}, expected "
            f"{want[worst].item():.9g}, off by {diff[worst].item():.3g} "
            f"(allowed: {tolerance['atol']:g} + {tolerance['rtol']:g} * |expected|)"
        )

    torch.testing.assert_close(actual, expected, **tolerance, msg=message)


def _grid(mask: torch.Tensor) -> str:
    rows = mask.to(torch.int8).tolist()
    return "\n".join("    " + " ".join(str(v) for v in row) for row in rows)


def assert_equal_mask(actual, expected: torch.Tensor, *, call: str, what: str = "mask") -> None:
    """Compare boolean masks exactly; small 2-D masks are drawn in the message."""
    check_tensor_kind(actual, expected, call=call, what=what)
    wrong = actual.cpu() != expected.cpu()
    if wrong.any():
        where = _index(int(wrong.flatten().nonzero()[0]), expected.shape)
        text = (
            f"{call} returned a wrong {what}: it differs at {int(wrong.sum())} of {wrong.numel()} positions; "
            f"first at index {where}: got {bool(actual[where])}, expected {bool(expected[where])}"
        )
        if expected.dim() == 2 and expected.shape[0] <= 8 and expected.shape[1] <= 12:
            text += f"\n  got (1 = True):\n{_grid(actual.cpu())}\n  expected:\n{_grid(expected.cpu())}"
        raise AssertionError(text)


def call_and_check_inputs(fn, call: str, **inputs: torch.Tensor):
    """Return fn(), after checking it left every named input tensor as it was.

    Run this before judging values: a kata that scales `query` in place would otherwise be
    told its output is wrong, which hides the real slip.
    """
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
        raise AssertionError(f"{call} modified its `{name}` argument in place; work on a copy or an out-of-place op")


# What a kata sees on the "meta" device when it reads tensor values in Python (.tolist(),
# .item(), int(t)): correct code on a real GPU, so such a device check is inconclusive.
META_DATA_ERRORS = ("Cannot copy out of meta tensor", "cannot be called on meta tensors")


def call_on_device(fn, device):
    """Call fn(); on "meta", return None when the kata needed tensor values to run.

    "meta" stands in for CUDA on machines without one: it shows whether results follow
    the inputs' device, but has no values. Code that reads values in Python is fine on a
    GPU, so it is not failed here; the CUDA run of the same test judges it fully.
    """
    try:
        return fn()
    except (NotImplementedError, RuntimeError) as error:
        if str(device) == "meta" and any(text in str(error) for text in META_DATA_ERRORS):
            return None
        raise


def assert_prints_nothing(capfd, call: str) -> None:
    """Library code prints nothing: output belongs to the caller."""
    out, err = capfd.readouterr()
    if out or err:
        raise AssertionError(
            f"{call} printed {(out + err)[:120]!r}{' ...' if len(out + err) > 120 else ''}; "
            "a library function should print nothing"
        )


def randn(generator: torch.Generator, *shape: int, dtype=torch.float32, device="cpu", std: float = 1.0) -> torch.Tensor:
    """Normal values drawn in float64 on the CPU, so every dtype and device sees the same numbers."""
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * std).to(dtype=dtype, device=device)


def random_keep_mask(generator: torch.Generator, *shape: int, p: float = 0.6) -> torch.Tensor:
    """Boolean [..., L, S] mask, True with probability p, with at least one True per row.

    Rows with no True would be fully masked for an API where True means "may attend":
    undefined in PyTorch, so never generated. Negate it for APIs where True blocks.
    """
    keep = torch.rand(*shape, generator=generator) < p
    one = torch.randint(shape[-1], (*shape[:-1], 1), generator=generator)
    return keep.scatter(-1, one, True)

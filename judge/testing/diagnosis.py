"""Failure diagnosis: which known slip a wrong result looks like, and what pattern it shows.

When a check fails inside `diagnosing(kata, replay, sizes)`, the kata's known slips (its
mutants graded "fail", applied to the current solution and loaded unguarded) are run on
the very same inputs and weights through `replay(implementation) -> {what: result}`, and
each one's result is compared with the learner's. A slip that gives the learner's wrong
result, and not the expected one, is named by its sentence: "looks like: <why>". A
failure that raised instead of returning is matched the same way, by a slip that raises
the same exception with the same message. When no slip matches, pattern signatures
computed from the learner's and the expected result alone may say what is off (a
constant factor, a transpose, an inverted mask, only the last row right...).

A diagnosis quotes the slips' sentences and fixed texts, never a line of their code. It
is attached to the exception (`kata_diagnosis`), which the plugin writes to the results
file. Only the first failures of a run are diagnosed: the table shows those, and a
failing kata stays quick to grade.
"""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from contextlib import contextmanager

import torch

from judge.forbidden import ForbiddenCallError
from judge.language import pick, tr
from judge.loading import KataLoadError, TorchStateChanged
from judge.mutants import MutantError, load_mutants
from judge.protocol import DIAGNOSED_FAILURES, SEVERAL, SINGLE
from judge.testing.checks import Mismatch
from judge.testing.tolerances import SINGLE_OP
from judge.testing.world_batch import batched

ATTEMPTS = DIAGNOSED_FAILURES  # failures diagnosed per run, at most; it stops at the first that names a single slip
MAX_SLIPS_NAMED = 2


class _Budget:
    attempts = ATTEMPTS
    active = False  # diagnosing now: the replays' own failures are not diagnosed


_budget = _Budget()


def reset_budget(attempts: int = ATTEMPTS) -> None:
    _budget.attempts = attempts


def _undiagnosable(error: BaseException) -> bool:
    """Failures whose cause is already plain: the stub, a refusal, a load error, the grader's limits."""
    plain = (NotImplementedError, ForbiddenCallError, KataLoadError, TorchStateChanged, MemoryError, KeyboardInterrupt)
    deadlock = type(error).__name__ == "WorldDeadlock"  # it says where each rank waits (judge/worlds.py)
    return isinstance(error, plain) or not isinstance(error, Exception) or deadlock


@contextmanager
def diagnosing(kata: str, replay: Callable, sizes: dict | None = None):
    """Run a check; if it fails, attach to the exception what the failure looks like."""
    try:
        yield
    except BaseException as error:
        if _budget.active or hasattr(error, "kata_diagnosis") or _undiagnosable(error) or _budget.attempts <= 0:
            raise
        _budget.attempts -= 1
        _budget.active = True
        try:
            error.kata_diagnosis = diagnose(kata, error, replay, sizes or {})
        except Exception:  # noqa: BLE001 - a diagnosis is a hint: it never changes a verdict
            error.kata_diagnosis = []
        finally:
            _budget.active = False
        if error.kata_diagnosis and error.kata_diagnosis[0].startswith(SINGLE):
            _budget.attempts = 0
        raise


def diagnose(kata: str, error: BaseException, replay: Callable, sizes: dict) -> list[str]:
    with batched([module for _, module in slips(kata)]):  # a distributed kata's replays: one world
        named = [why for why, module in slips(kata) if _same_failure(error, _outcome(replay, module))]
    if named:
        if len(named) == 1:
            return [SINGLE + named[0]]
        return [SEVERAL + " / ".join(named[:MAX_SLIPS_NAMED])]
    return signatures(error, sizes) if isinstance(error, Mismatch) else []


# --------------------------------------------------------------------------- the known slips


@functools.cache
def slips(kata: str) -> tuple[tuple[str, types.ModuleType], ...]:
    """(why, module) for each mutant of `kata` that is graded "fail", loaded as a module."""
    found = []
    for mutant in load_mutants(kata):
        if mutant.expect != "fail":
            continue  # a delegating slip is refused by the guard with its own message
        name = f"kata_slip_{kata}_{mutant.name}"
        module = types.ModuleType(name)
        module.__file__ = f"<slip {mutant.id}>"
        sys.modules[name] = module  # dataclasses and pickling look modules up here
        try:
            exec(compile(mutant.applied(), module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own mutants
        except (MutantError, Exception):  # noqa: BLE001 - a slip that does not load is no candidate
            continue
        found.append((pick(mutant.why, mutant.why_zh), module))
    return tuple(found)


def _outcome(replay: Callable, module) -> dict | Exception:
    """What the replay gives with `module` as the implementation: its results, or what it raised."""
    with torch.random.fork_rng(devices=[]):
        try:
            return replay(module)
        except Exception as raised:  # noqa: BLE001 - raising the same way is a fingerprint too
            return raised


def _same_failure(error: BaseException, outcome) -> bool:
    if isinstance(error, Mismatch):
        if isinstance(outcome, Exception) or not isinstance(outcome, dict) or error.what not in outcome:
            return False
        slip = outcome[error.what]
        if isinstance(slip, torch.Tensor) and not error.kind_only:
            slip = error.project(slip)
        return _same(slip, error.actual, error) and not _same(slip, error.expected, error)
    return isinstance(outcome, Exception) and type(outcome) is type(error) and str(outcome) == str(error)


def _same(a, b, error: Mismatch) -> bool:
    """Equal results: tensors within the mismatch's tolerance, containers item by item, the rest by repr."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, error) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], error) for k in a)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return type(a) is type(b) and not isinstance(a, torch.Tensor) and repr(a) == repr(b)
    if (a.shape, a.dtype, a.device) != (b.shape, b.dtype, b.device):
        return False
    if a.is_meta:
        return True
    a, b = a.detach().cpu(), b.detach().cpu()
    if not a.is_floating_point():
        return torch.equal(a, b)
    tolerance = error.tolerance or SINGLE_OP.get(a.dtype, {"rtol": 0.0, "atol": 0.0})
    return torch.allclose(a.double(), b.double(), rtol=tolerance["rtol"], atol=tolerance["atol"], equal_nan=True)


# --------------------------------------------------------------------------- pattern signatures


def signatures(error: Mismatch, sizes: dict) -> list[str]:
    """At most two lines, each from a small test of the learner's result against the expected one."""
    got, want = error.actual, error.expected
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.is_meta or want.is_meta:
        return [line for line in [wrong_kind(got, want)] if line]
    if error.kind_only:
        return [line for line in [wrong_kind(got, want)] if line]
    got, want = got.detach().cpu(), want.detach().cpu()
    if got.is_floating_point():
        got, want = got.double(), want.double()
    tolerance = error.tolerance
    found = []
    for signature in SIGNATURES:
        line = signature(got, want, tolerance, sizes)
        if line:
            found.append(line)
    return found[:2]


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: dict | None) -> bool:
    if not a.is_floating_point():
        return torch.equal(a, b)
    tolerance = tolerance or {"rtol": 1e-6, "atol": 1e-6}
    return a.shape == b.shape and torch.allclose(a, b, rtol=tolerance["rtol"], atol=tolerance["atol"])


def wrong_kind(got, want) -> str | None:
    """The right values in the wrong dtype, or on the wrong device."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.shape != want.shape:
        return None
    if got.device != want.device:
        if got.is_meta or want.is_meta or torch.equal(got.detach().cpu().double(), want.detach().cpu().double()):
            return tr(
                "the result is made on {got}, not on the inputs' device ({want}): "
                "create new tensors with device= the inputs' device",
                got=got.device,
                want=want.device,
            )
        return None
    if got.dtype != want.dtype and torch.allclose(got.detach().double(), want.detach().double(), rtol=1e-2, atol=1e-3):
        return tr(
            "the values are right but the dtype is {got}, not {want}: compute in any precision, return the inputs' dtype",
            got=got.dtype,
            want=want.dtype,
        )
    return None


def constant_factor(got, want, tolerance, sizes) -> str | None:
    """Every value is the expected one times the same number: a scale slip, named when it can be."""
    if not got.is_floating_point() or not torch.isfinite(got).all() or want.abs().max() == 0:
        return None
    factor = float((got * want).sum() / (want * want).sum())
    if abs(factor - 1) < 1e-3 or not _close(got, factor * want, tolerance):
        return None
    if abs(factor + 1) < 1e-3:
        return tr("every value has the opposite sign: a sign is flipped")
    return tr(
        "every value is the expected one times {factor:.4g}{named}", factor=factor, named=_name_factor(factor, sizes)
    )


def _name_factor(factor: float, sizes: dict) -> str:
    """' = sqrt(hs) (hs = 4): check the scale' when the factor is a size's square root (first:
    the usual scale slips), its inverse, or the size itself."""
    named = {}
    E, H = sizes.get("E"), sizes.get("H")
    if isinstance(E, int) and isinstance(H, int) and H > 0 and E % H == 0 and E // H > 1:
        named["hs"] = E // H
    named |= {k: v for k, v in sizes.items() if isinstance(v, int) and v > 1}
    roots = [(f"sqrt({k})", k, math.sqrt(n)) for k, n in named.items()]
    roots += [(f"1/sqrt({k})", k, 1 / math.sqrt(n)) for k, n in named.items()]
    plain = [(k, k, n) for k, n in named.items()] + [(f"1/{k}", k, 1 / n) for k, n in named.items()]
    for text, name, value in roots + plain:
        if abs(factor - value) <= 1e-3 * value:
            return tr(
                " = {expression} ({name} = {size}): check the scale", expression=text, name=name, size=named[name]
            )
    return ""


def transposed(got, want, tolerance, sizes) -> str | None:
    """The expected result with its last two dimensions swapped."""
    if got.dim() < 2 or got.shape[-1] != got.shape[-2] or got.shape[-1] < 2:
        return None
    if _close(got.transpose(-2, -1), want, tolerance):
        return tr("the result is the expected one transposed: its last two dimensions are swapped")
    return None


def inverted_mask(got, want, tolerance, sizes) -> str | None:
    """True exactly where False is expected: the other API's polarity."""
    if got.dtype != torch.bool or not torch.equal(got, ~want):
        return None
    return tr("every True should be False and every False True: the mask's polarity is inverted")


def one_row_right(got, want, tolerance, sizes) -> str | None:
    """Only the first, or only the last, row (query) is right."""
    if got.dim() < 2 or got.shape[-2] < 2:
        return None
    rows = [_close(got[..., i, :], want[..., i, :], tolerance) for i in range(got.shape[-2])]
    if rows[-1] and not any(rows[:-1]):
        return tr(
            "only the last row is right: every earlier row (query) sees keys it should not, or misses some "
            "(a causal mask missing?)"
        )
    if rows[0] and not any(rows[1:]):
        return tr("only the first row is right: the rows (queries) after it are off (a causal mask misaligned?)")
    return None


def values_in_wrong_places(got, want, tolerance, sizes) -> str | None:
    """The right values, in the wrong places: a transpose or reshape that mixes dimensions."""
    if not got.is_floating_point() or got.numel() < 2 or transposed(got, want, tolerance, sizes):
        return None
    if _close(got.flatten().sort().values, want.flatten().sort().values, tolerance):
        return tr(
            "the right values in the wrong places: a transpose or reshape mixes up dimensions "
            "(heads merged back in the wrong order?)"
        )
    return None


def nan_rows(got, want, tolerance, sizes) -> str | None:
    """NaN in whole rows only: a softmax over a row whose every key was blocked."""
    if not got.is_floating_point() or got.dim() < 2:
        return None
    nan = torch.isnan(got) & ~torch.isnan(want)
    if nan.any() and torch.equal(nan.all(-1), nan.any(-1)):
        return tr(
            "NaN fills whole rows: a softmax over a row whose every key is blocked "
            "(mask polarity? padding applied to the queries?)"
        )
    return None


def shifted_rows(got, want, tolerance, sizes) -> str | None:
    """Off by a constant along each row (e.g. a log-softmax without its normaliser)."""
    if not got.is_floating_point() or got.dim() < 1 or got.shape[-1] < 2 or not torch.isfinite(got).all():
        return None
    shift = (got - want).mean(-1, keepdim=True)
    if _close(got - shift, want, tolerance) and not _close(shift, torch.zeros_like(shift), tolerance):
        return tr("off by a constant along each row: right up to a per-row shift")
    return None


SIGNATURES = (constant_factor, transposed, inverted_mask, one_row_right, values_in_wrong_places, nan_rows, shifted_rows)

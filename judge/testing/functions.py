"""The shared path of the function katas: one way to call the learner's function and judge it.

A kata's test module declares a FunctionKata beside its SPEC; its tests then say what to
call and how to compare, and this module does the rest: the call runs where the kata
lives (a scenario, on copies of the arguments), the same call replays on a known slip for
the diagnosis, the arguments come back so the judge can tell, by value, whether the kata
changed them, and gradients and expected exceptions have one form each.

    SOFTMAX = FunctionKata(SPEC, outputs={"softmax": "probabilities"})

    with SOFTMAX.judging(kata, x, dim=1, sizes=case) as call:
        SPEC.assert_close(call["probabilities"], expected, call=call.text, what="probabilities")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from judge.language import tr
from judge.testing.checks import call_repr, describe, judge_on_device
from judge.testing.diagnosis import diagnosing
from judge.testing.scenarios import scenario

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases run in it, and show first
HALF = (torch.float16, torch.bfloat16)


def computation_eps(dtype: torch.dtype) -> float:
    """The machine epsilon of the precision a result of `dtype` is computed in: float64's for
    float64, float32's for every other dtype (half precision is computed in float32)."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


@scenario
def called(kata, symbol: str, args: tuple, kwargs: dict) -> dict:
    """kata.<symbol>(*args, **kwargs): its result, and the arguments as the call left them."""
    result = getattr(kata, symbol)(*args, **kwargs)
    return {"result": result, "args": args, "kwargs": kwargs}


@scenario
def differentiated(kata, symbol: str, args: tuple, kwargs: dict, wrt: tuple, upstream, output: int | None) -> dict:
    """The gradients autograd computes through kata.<symbol>: the arguments named in `wrt`
    (positions or keyword names) made leaves that require grad, `output` (an index into a
    tuple result, or None for a tensor result) dotted with `upstream`, then backward."""
    args, kwargs = list(args), dict(kwargs)
    for where in wrt:
        holder, key = (args, where) if isinstance(where, int) else (kwargs, where)
        holder[key] = holder[key].detach().requires_grad_()
    result = getattr(kata, symbol)(*args, **kwargs)
    chosen = result if output is None else result[output]
    if not isinstance(chosen, torch.Tensor) or not chosen.requires_grad:
        return {"result": chosen, "requires_grad": False, "grads": {}}
    (chosen * upstream).sum().backward()
    grads = {where: (args[where] if isinstance(where, int) else kwargs[where]).grad for where in wrt}
    return {"result": chosen.detach(), "requires_grad": True, "grads": grads}


@scenario
def raised(kata, symbol: str, args: tuple, kwargs: dict) -> dict:
    """What kata.<symbol>(*args, **kwargs) raised (its class and base classes' names), or what it returned."""
    try:
        result = getattr(kata, symbol)(*args, **kwargs)
    except NotImplementedError:  # the stub: its own verdict
        raise
    except Exception as error:  # noqa: BLE001 - the judge decides what was expected
        return {"raised": [cls.__name__ for cls in type(error).__mro__], "message": str(error)}
    return {"returned": result}


# --------------------------------------------------------------------------- the judging process's side


class Call(Mapping):
    """One call of the learner's function: how it looked (`text`), its outputs by name
    (call["output"]), and the arguments as the call left them."""

    def __init__(self, text: str, outputs: dict, args: tuple, kwargs: dict, raw):
        self.text, self.outputs, self.args, self.kwargs, self.raw = text, outputs, args, kwargs, raw

    def __getitem__(self, what: str):
        return self.outputs[what]

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)


def named(what: str) -> Callable:
    """outputs for a function that returns one tensor, called `what` in messages."""
    return lambda result, text: {what: result}


def tuple_of(*names: str) -> Callable:
    """outputs for a function that returns a tuple, one name per element, e.g. tuple_of("grad_query",
    "grad_key", "grad_value")."""

    def outputs(result, text: str) -> dict:
        if not isinstance(result, (tuple, list)) or len(result) != len(names):
            what = {2: tr("a pair"), 3: tr("a triple")}.get(len(names)) or tr("a tuple of {count}", count=len(names))
            raise AssertionError(
                tr(
                    "{call} returned {got}; expected {what} ({names})",
                    call=text,
                    got=describe(result),
                    what=what,
                    names=", ".join(names),
                )
            )
        return dict(zip(names, result))

    return outputs


def pair(first: str, second: str) -> Callable:
    """outputs for a function that returns a pair, e.g. (output, weights)."""
    return tuple_of(first, second)


@dataclass(frozen=True)
class FunctionKata:
    """How a function kata is called. spec: its KataSpec (the kata's name, its main symbol).
    outputs: how a result becomes {what: value} (named("mask"), pair("output", "weights")),
    after checking its form; one for every symbol, or a dict symbol -> outputs (a str names a
    single tensor). parameters: the names of each symbol's positional parameters, for messages
    about arguments changed in place (from the stub's signature)."""

    spec: object
    outputs: Callable | Mapping = field(default_factory=lambda: named("result"))
    parameters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    full: tuple = FULL
    half: tuple = HALF

    @property
    def kata(self) -> str:
        return self.spec.kata

    def outputs_of(self, symbol: str) -> Callable:
        chosen = self.outputs.get(symbol, named("result")) if isinstance(self.outputs, Mapping) else self.outputs
        return named(chosen) if isinstance(chosen, str) else chosen

    def text(self, symbol: str, args: tuple, kwargs: dict) -> str:
        return call_repr(symbol, *args, **kwargs)

    def call(self, implementation, *args, symbol: str | None = None, **kwargs) -> Call:
        """The call, run where `implementation` lives, on copies of the arguments."""
        symbol = symbol or self.spec.symbol
        text = self.text(symbol, args, kwargs)
        try:
            got = called(implementation, symbol, args, kwargs)
        except Exception as error:
            named_call(error, text)
            raise
        return Call(text, self.outputs_of(symbol)(got["result"], text), got["args"], got["kwargs"], got["result"])

    def replay(self, *args, symbol: str | None = None, **kwargs) -> Callable[[object], dict]:
        """The same call with another implementation (a known slip's), for the diagnosis."""
        return lambda implementation: self.call(implementation, *args, symbol=symbol, **kwargs).outputs

    @contextlib.contextmanager
    def judging(self, kata, *args, symbol: str | None = None, sizes=None, **kwargs):
        """Context manager: the learner's call (as `call`), and a failing check inside says which
        known slip it looks like, by replaying the same call on each."""
        with diagnosing(self.kata, self.replay(*args, symbol=symbol, **kwargs), dict(sizes or {})):
            yield self.call(kata, *args, symbol=symbol, **kwargs)

    def on_device(self, kata, device: str, *, make, expected, compare, symbol=None, sizes=None) -> None:
        """Results follow the device of the inputs (checks.judge_on_device): make(device) ->
        (args, kwargs) for a call on `device`; expected(device) -> {what: tensor}; compare(got,
        want, call=, what=) judges a value where the device has values. Use fixed sizes (an
        edge case): a stand-in's verdict must not depend on the seed."""

        def run(where: str, check) -> None:
            args, kwargs = make(where)
            with self.judging(kata, *args, symbol=symbol, sizes=sizes, **kwargs) as call:
                check(call.text, call.outputs)

        judge_on_device(run, device, expected=expected, compare=compare)

    # ----------------------------------------------------------------------- conventions

    def judging_inputs(self, kata, *args, symbol: str | None = None, sizes=None, **kwargs) -> None:
        """The learner's call must leave every tensor argument as it was sent; the diagnosis
        replays the call and the same check on each known slip (an in-place slip is named)."""

        def check(implementation) -> dict:
            call = self.call(implementation, *args, symbol=symbol, **kwargs)
            self.assert_inputs_unchanged(call, args, kwargs, symbol=symbol)
            return {}

        with diagnosing(self.kata, check, dict(sizes or {})):
            check(kata)

    def assert_inputs_unchanged(self, call: Call, args: tuple, kwargs: dict, *, symbol: str | None = None) -> None:
        """Inputs belong to the caller: every tensor argument must come back as it was sent."""
        names = self.parameters.get(symbol or self.spec.symbol, ())
        label = [names[i] if i < len(names) else f"argument {i + 1}" for i in range(len(args))]
        assert_inputs_unchanged(
            call.text,
            dict(zip(label, args)) | kwargs,
            dict(zip(label, call.args)) | {name: call.kwargs.get(name) for name in kwargs},
        )

    def assert_raises(self, kata, expected: type, *args, reason: str, symbol: str | None = None, **kwargs) -> None:
        """kata.<symbol>(*args, **kwargs) must raise `expected` (or a subclass)."""
        symbol = symbol or self.spec.symbol
        raises(self.kata, kata, symbol, expected, args, kwargs, reason=reason, text=self.text(symbol, args, kwargs))

    # ----------------------------------------------------------------------- gradients

    def gradients(
        self,
        implementation,
        *args,
        wrt: tuple,
        upstream: torch.Tensor,
        output: int | None = None,
        symbol: str | None = None,
        **kwargs,
    ) -> dict:
        """{"the gradient of NAME": tensor} autograd computes through the learner's call (see
        `differentiated`); fails with a message when autograd lost track of an input."""
        symbol = symbol or self.spec.symbol
        text = self.text(symbol, args, kwargs) + ".backward"
        got = differentiated(implementation, symbol, args, kwargs, tuple(wrt), upstream, output)
        names = self.parameters.get(symbol, ())
        label = {w: (names[w] if isinstance(w, int) and w < len(names) else str(w)) for w in wrt}
        if not got["requires_grad"]:
            which = ", ".join(label.values())
            raise AssertionError(
                tr("{call}: the result does not require grad; autograd lost track of {which}", call=text, which=which)
            )
        found = {}
        for where in wrt:
            if got["grads"].get(where) is None:
                raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text, name=label[where]))
            found[f"the gradient of `{label[where]}`"] = got["grads"][where]
        return found

    @contextlib.contextmanager
    def judging_gradients(self, kata, *args, wrt: tuple, upstream, output=None, symbol=None, sizes=None, **kwargs):
        """Context manager: the learner's gradients (as a dict), diagnosed like `judging`."""
        options = {"wrt": wrt, "upstream": upstream, "output": output, "symbol": symbol}

        def replay(implementation) -> dict:
            return self.gradients(implementation, *args, **options, **kwargs)

        with diagnosing(self.kata, replay, dict(sizes or {})):
            yield self.gradients(kata, *args, **options, **kwargs)


def named_call(error: BaseException, text: str) -> None:
    """An error the kata raised (or a call that did not bind) names the call that raised it:
    the learner reads the kata process's text, which knows nothing of the call."""
    from judge.protocol import ErrorKind

    kind, name, message = getattr(error, "kata_error", (None, "", ""))
    if kind in (ErrorKind.RAISED, ErrorKind.SIGNATURE) and not getattr(error, "call_named", False):
        error.kata_error = (kind, name, f"{text}: {message}")
        error.call_named = True


def assert_inputs_unchanged(text: str, sent: dict, came: dict) -> None:
    """Every tensor in `sent` (argument name -> value) must be in `came` (the same names, as the
    call left them) with exactly its values: inputs belong to the caller."""
    for name, before in sent.items():
        if isinstance(before, torch.Tensor) and not before.is_meta and not same_values(before, came.get(name)):
            raise AssertionError(
                tr(
                    "{call} modified its `{name}` argument in place; work on a copy or an out-of-place op",
                    call=text,
                    name=name,
                )
            )


def raises(
    kata_name: str, kata, symbol: str, expected: type, args: tuple, kwargs: dict, *, reason: str, text: str
) -> None:
    """kata.<symbol>(*args, **kwargs) (a function, or a class to construct) must raise
    `expected` or a subclass of it: decided here, from the class names the kata process reports."""

    def check(implementation) -> dict:
        got = raised(implementation, symbol, args, kwargs)
        if "returned" in got:
            raise AssertionError(
                tr(
                    "{call} returned {got}; expected {error} ({reason})",
                    call=text,
                    got=describe(got["returned"]),
                    error=expected.__name__,
                    reason=reason,
                )
            )
        if expected.__name__ not in got["raised"]:
            raise AssertionError(
                tr(
                    "{call} raised {name}: {error}; expected {expected} ({reason})",
                    call=text,
                    name=got["raised"][0],
                    error=got["message"],
                    expected=expected.__name__,
                    reason=reason,
                )
            )
        return {}

    with diagnosing(kata_name, check, {}):
        check(kata)


def same_values(before: torch.Tensor, after) -> bool:
    """Whether `after` holds exactly `before`'s values (NaN where NaN was), in the same kind."""
    if not isinstance(after, torch.Tensor) or after.shape != before.shape or after.dtype != before.dtype:
        return False
    a, b = before.detach().cpu(), after.detach().cpu()
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)

"""Scenarios: the only places where a test touches the learner's code.

A scenario is a function of a test module (or of judge.testing) decorated with @scenario.
Its first argument is an implementation of the kata (a module with the kata's symbols),
its other arguments and its result are plain data: tensors, numbers, strings, dtypes,
devices, and tuples, lists and dicts of them (module-level functions may be passed too).

    @scenario
    def masked(kata, n, device):
        return {"mask": kata.causal_mask(n, device=device)}

    got = masked(kata, 7, "cpu")["mask"]      # in the kata process: the learner's code
    slip = masked(slip_module, 7, "cpu")      # here: a known slip's, for the diagnosis

Called with the `kata` fixture (an `Elsewhere`), it runs in the kata process on copies of
its arguments and its result comes back as data; called with any other implementation it
runs here, also on copies, so it behaves the same. Both start from the same random seed,
so a scenario that draws (dropout, sampling) draws the same numbers wherever it runs.
The judging process builds every reference, compares and decides: no object of the
kata's ever crosses, and what a scenario returns is the kata's word (see docs/guide.md, "What
the judge guarantees").
"""

from __future__ import annotations

import functools

SEED = 1234  # the global random seed every scenario starts from, wherever it runs


class Elsewhere:
    """An implementation that lives in another process (the kata fixture): its scenarios run there."""

    def run(self, function, args: tuple, kwargs: dict):  # pragma: no cover - an interface
        raise NotImplementedError

    def run_world(self, function, size: int, args: tuple, kwargs: dict) -> list:  # pragma: no cover
        raise NotImplementedError


class Scenario:
    """A scenario function, callable with any implementation (see the module docstring)."""

    def __init__(self, function):
        functools.update_wrapper(self, function)
        self.function = function

    def __call__(self, implementation, *args, **kwargs):
        if isinstance(implementation, Elsewhere):
            return implementation.run(self.function, args, kwargs)
        return run_here(self.function, implementation, copied(args), copied(kwargs))

    def __repr__(self) -> str:
        return f"<scenario {self.function.__module__}.{self.function.__qualname__}>"


def scenario(function) -> Scenario:
    """Mark a module-level function as a scenario."""
    return Scenario(function)


class WorldScenario(Scenario):
    """A scenario played on every rank of a world (judge.worlds): `ring(kata, 4, x)` runs
    ring(kata_of_rank, x) on ranks 0-3, each after joining the world's process group, and
    gives [each rank's result]. The kata fixture's worlds are hosted by its kata process;
    another implementation's (a slip's, for the diagnosis) are forked from here."""

    def __call__(self, implementation, size: int, *args, **kwargs) -> list:
        if isinstance(implementation, Elsewhere):
            return implementation.run_world(self.function, size, args, kwargs)
        import tempfile

        from judge.remote.answers import rebuild_error
        from judge.remote.wire import tag_of
        from judge.testing.world_batch import lookup
        from judge.worlds import run_world

        def play(kata):  # on copies at each call: a batch plays several slips on one rank
            return run_here(self.function, kata, copied(args), copied(kwargs))

        call = (self.function.__module__, self.function.__qualname__, args, kwargs)
        found = lookup(implementation, size, call, play)  # a slip's, for the diagnosis: one world for all
        if found is not None:
            return found
        with tempfile.TemporaryDirectory(prefix="kata-world-") as private:
            answers = run_world(play, size, load=lambda: implementation, private_dir=private)
        if tag_of(answers[0]) == "error":
            raise rebuild_error(answers[0])
        return [answer["value"] for answer in answers]


def world_scenario(function) -> WorldScenario:
    """Mark a module-level function as a scenario played on every rank of a world."""
    return WorldScenario(function)


def run_here(function, implementation, args: tuple, kwargs: dict):
    """function(implementation, *args, **kwargs) from the scenario seed, the caller's random
    state left as it was (the kata process runs its scenarios through here too). The CPU's
    generator only, and a GPU's once CUDA is up: torch.manual_seed would also record a stack
    trace for each lazy device (CUDA, MTIA, XPU) on every call."""
    import torch  # here: the command line imports this module (timing's scenario) without torch

    state = torch.get_rng_state()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cuda_states = torch.cuda.get_rng_state_all() if cuda else None
    torch.default_generator.manual_seed(SEED)
    if cuda:
        torch.cuda.manual_seed_all(SEED)
    try:
        return function(implementation, *args, **kwargs)
    finally:
        torch.set_rng_state(state)
        if cuda:
            torch.cuda.set_rng_state_all(cuda_states)


def outcome(fn) -> str:
    """What a call did, as a sentence a scenario returns: "raised ValueError", "raised
    RuntimeError: ...", or "returned normally". The stub's NotImplementedError and the guard's
    refusals propagate: they are verdicts of their own."""
    try:
        fn()
    except ValueError:
        return "raised ValueError"
    except Exception as error:  # noqa: BLE001 - the message names what was raised instead
        return raised(error)
    return "returned normally"


def raised(error: Exception, limit: int | None = None) -> str:
    """An exception a scenario caught, as the text it returns ("raised KeyError: 300"), cut to
    `limit` characters; the stub's NotImplementedError and the guard's refusals are raised
    again: they are verdicts of their own."""
    from judge.forbidden import ForbiddenCallError  # here: forbidden imports torch

    if isinstance(error, (NotImplementedError, ForbiddenCallError)):
        raise error
    return f"raised {type(error).__name__}: {error}"[:limit]


def copied(value):
    """Tensors copied with their strides (a transposed view stays transposed), containers rebuilt."""
    import torch

    if isinstance(value, torch.Tensor):
        if any(stride == 0 and size > 1 for size, stride in zip(value.shape, value.stride())):
            return value.detach().clone()  # an expanded tensor: its copy cannot share elements
        empty = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=value.device)
        return empty if value.is_meta else empty.copy_(value.detach())
    if isinstance(value, torch.Size):  # a tuple, as the wire carries it
        return value
    if isinstance(value, tuple):
        return tuple(copied(v) for v in value)
    if isinstance(value, list):
        return [copied(v) for v in value]
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    return value

"""The known slips' replays of a world scenario, played in one world instead of one world each.

The diagnosis (judge.testing.diagnosis) replays a failed case on every known slip of a kata.
For a distributed kata each replay was a world of its own (judge.worlds: N ranks forked from
the judging process, a rendezvous, a process group), so a diagnosis forked a world per slip:
most of a failing grade's cost. Inside `batched(modules)`, the first replay of a world call
plays that same call for this slip and every later one in ONE world: each rank plays the
slips in turn, each in a process group of its own, so a stray message of one slip never
reaches the next. Only where every rank returned is a slip's result taken from the batch: a
slip that raised on some rank, or every slip of a batch whose world failed (a deadlock, a dead
rank), is replayed alone as before. A batch changes the number of worlds, never an outcome.

A replay matches a batched call only if it makes the same call (the same scenario, world size
and arguments, compared by content: `digest`) as the n-th world call of its replay.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class _Batch:
    modules: list  # the slips, in the order the diagnosis replays them
    calls: dict = field(default_factory=dict)  # id(module) -> world calls its replay made so far
    found: dict = field(default_factory=dict)  # (n, size, digest) -> {id(module): [each rank's value]}


_active: _Batch | None = None


@contextmanager
def batched(modules):
    """Within: a world call replayed on one of `modules` is played for it and the later ones at once."""
    global _active
    previous, _active = _active, _Batch(list(modules))
    try:
        yield
    finally:
        _active = previous


def lookup(implementation, size: int, call: tuple, play) -> list | None:
    """[each rank's result] of a world call on `implementation` from a batch; None when it must
    be played alone (no batch, or the slip failed in it). `call` is what identifies the call
    (the scenario's name and arguments), `play(module)` plays it on a rank for one module."""
    batch = _active
    place = next((n for n, module in enumerate(batch.modules) if module is implementation), None) if batch else None
    if place is None:
        return None
    count = batch.calls.get(id(implementation), 0)
    batch.calls[id(implementation)] = count + 1
    key = (count, size, digest(call))
    if key not in batch.found:
        batch.found[key] = _play_all(play, batch.modules[place:], size)
    return batch.found[key].get(id(implementation))  # None: it failed in the batch, so alone


def _play_all(play, modules: list, size: int) -> dict:
    """{id(module): [each rank's result]} for the modules every rank played to the end."""
    from judge.remote.wire import tag_of
    from judge.worlds import run_world

    with tempfile.TemporaryDirectory(prefix="kata-world-") as private:
        try:
            answers = run_world(
                functools.partial(_play_each, play, modules, private), size, load=lambda: None, private_dir=private
            )
        except Exception:  # noqa: BLE001 - a deadlock, or anything else: each slip alone, as before
            return {}
    if tag_of(answers[0]) == "error":  # a rank died, or could not join the first group
        return {}
    found = {}
    for n, module in enumerate(modules):
        each = [answer["value"][n] for answer in answers]
        if all(tag_of(played) != "error" for played in each):
            found[id(module)] = [played["value"] for played in each]
    return found


def _play_each(play, modules: list, private: str, _) -> list:
    """On one rank: each module's play ({"value": ...} or its error facts), each after joining a
    process group of its own."""
    import torch.distributed as dist

    from judge.remote.answers import as_data, error_facts
    from judge.worlds import join_group

    rank, size = dist.get_rank(), dist.get_world_size()
    played = []
    for n, module in enumerate(modules):
        try:
            if n:
                dist.destroy_process_group()
                join_group(f"file://{private}/slip-{n}", rank, size)
            played.append({"value": as_data(play(module))})
        except Exception as error:  # noqa: BLE001 - this slip (and, without a group, the next ones) alone
            played.append(error_facts(error, ""))
    return played


def digest(value) -> str:
    """A fingerprint of data as scenarios take it: tensors by dtype, shape, strides and values."""
    hasher = hashlib.blake2b(digest_size=16)
    _feed(hasher, value)
    return hasher.hexdigest()


def _feed(hasher, value) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        hasher.update(repr(("tensor", value.dtype, tuple(value.shape), value.stride(), value.device)).encode())
        if not value.is_meta:
            flat = value.detach().cpu().contiguous().reshape(-1)
            hasher.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{type(value).__name__}[{len(value)}](".encode())
        for item in value:
            _feed(hasher, item)
        hasher.update(b")")
    elif isinstance(value, dict):
        hasher.update(f"dict[{len(value)}](".encode())
        for key, item in value.items():
            _feed(hasher, key)
            _feed(hasher, item)
        hasher.update(b")")
    elif callable(value) and hasattr(value, "__qualname__"):
        hasher.update(f"callable {getattr(value, '__module__', '')}.{value.__qualname__}".encode())
    else:
        hasher.update(f"{type(value).__name__} {value!r}".encode())

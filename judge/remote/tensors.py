"""What both ends of the channel need to keep tensors in step: where the tensors and the
containers are among a call's arguments (both walk them in the same order), and how to
tell that a tensor changed (a fingerprint, and its values: a write through .data leaves
no trace in the version counter)."""

from __future__ import annotations

import torch
from torch import nn


def fingerprint(tensor: torch.Tensor) -> tuple:
    """What changes when a tensor is written, replaced, moved or made to need gradients."""
    pointer = 0 if tensor.is_meta else tensor.untyped_storage().data_ptr()
    return (
        id(tensor),
        pointer,
        tensor._version,
        tensor.dtype,
        tensor.device,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.requires_grad,
    )


def keys_of(state: dict) -> list[str]:
    """The tensors a state names, as fingerprint keys ("params.weight")."""
    return [f"{group}.{name}" for group in ("params", "buffers", "tensors") for name in state.get(group, {})]


def same_values(tensor: torch.Tensor, copy: torch.Tensor | None) -> bool:
    """Whether `tensor` still holds `copy`'s values (a tensor on "meta" has none to change)."""
    if copy is None:
        return False
    if tensor.is_meta:
        return True
    return tensor.dtype == copy.dtype and tensor.shape == copy.shape and bool(torch.equal(tensor.detach(), copy))


def flat_tensors(value, out: list) -> list:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            flat_tensors(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            flat_tensors(item, out)
    return out


def flat_containers(value, out: list | None = None, top: bool = True) -> list:
    """The lists and dicts among a call's arguments, in a fixed order (the judge walks the same)."""
    out = [] if out is None else out
    if isinstance(value, (list, dict)) and not top:
        out.append(value)
    if isinstance(value, (tuple, list)):
        for item in value:
            flat_containers(item, out, top=False)
    elif isinstance(value, dict):
        for item in value.values():
            flat_containers(item, out, top=False)
    return out


def same_kind(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.device == b.device and a.shape == b.shape and a.stride() == b.stride()


def tensors_of(obj) -> dict[str, torch.Tensor]:
    """An object's tensors by key: "params.NAME" and "buffers.NAME" of a module (empty slots
    left out), "tensors.NAME" for its other public tensor attributes."""
    found = {}
    if isinstance(obj, nn.Module):
        found |= {f"params.{n}": p for n, p in obj._parameters.items() if p is not None}
        found |= {f"buffers.{n}": b for n, b in obj._buffers.items() if b is not None}
    for name, value in getattr(obj, "__dict__", {}).items():
        if not name.startswith("_") and isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
            found[f"tensors.{name}"] = value
    return found


def tensor_at(obj, key: str) -> torch.Tensor:
    """The tensor of `obj` under `key` (as tensors_of names it)."""
    group, name = key.split(".", 1)
    if group == "params":
        return obj._parameters[name]
    return obj._buffers[name] if group == "buffers" else vars(obj)[name]


class Seen:
    """What the other end of the channel holds of each object (by handle): per tensor key a
    fingerprint and a copy of the values (a write through .data changes them and leaves the
    fingerprint as it was), and a module's train/eval mode."""

    def __init__(self):
        self.prints: dict[int, dict] = {}
        self.values: dict[int, dict[str, torch.Tensor]] = {}

    @staticmethod
    def prints_of(obj) -> dict:
        prints = {key: fingerprint(t) for key, t in tensors_of(obj).items()}
        if isinstance(obj, nn.Module):
            prints["training"] = obj.training
        return prints

    def remember(self, handle: int, obj, keys=None) -> None:
        """The other end now holds `obj` as it is: all of it, or only `keys` (what went across)."""
        now = self.prints_of(obj)
        if keys is None or handle not in self.prints:
            self.prints[handle], self.values[handle] = now, {}
            keys = [key for key in now if key != "training"]
        self.prints[handle]["training"] = now.get("training")
        for key in keys:
            if key in now:
                self.prints[handle][key] = now[key]
                self.values[handle][key] = tensor_at(obj, key).detach().clone()

    def changed(self, handle: int, obj) -> tuple[list[str], bool]:
        """(the tensor keys the other end does not hold as they are, whether the mode changed)."""
        before, values = self.prints.get(handle, {}), self.values.get(handle, {})
        now = self.prints_of(obj)
        keys = [
            key
            for key, print_ in now.items()
            if key != "training"
            and not (before.get(key) == print_ and same_values(tensor_at(obj, key), values.get(key)))
        ]
        return keys, "training" in now and before.get("training") != now["training"]

    def moved(self, handle: int, obj, key: str) -> bool:
        """Whether the tensor under `key` is another tensor, or has other storage, than the one
        the other end last got (it then replaces its own instead of writing into it)."""
        before = self.prints.get(handle, {}).get(key)
        return before is None or before[:2] != fingerprint(tensor_at(obj, key))[:2]


def involved(roots, handle_of) -> list[int]:
    """Handles of the objects reachable from `roots` (through lists, tuples, dicts and a
    module's submodules) that `handle_of` knows (it returns None for the others)."""
    found, stack, seen = [], list(roots), set()
    while stack:
        value = stack.pop()
        if isinstance(value, (tuple, list)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif (handle := handle_of(value)) is not None and handle not in seen:
            seen.add(handle)
            found.append(handle)
            if isinstance(value, nn.Module):
                stack.extend(child for child in value._modules.values() if child is not None)
    return found

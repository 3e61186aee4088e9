"""What both ends of the channel need to keep tensors in step: where the tensors and the
containers are among a call's arguments (both walk them in the same order), and how to
tell that a tensor changed (a fingerprint, and its values: a write through .data leaves
no trace in the version counter)."""

from __future__ import annotations

import torch


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

"""Frames on the socket between the judging process and the kata process.

A frame is an 8-byte length and a payload: a pickle in which every tensor has been replaced
by a plain description (dtype, shape, strides, offset) and the bytes of its storage, each
storage once, so views keep sharing it across. The judge's requests are read with pickle
itself (the judge is trusted; a request may carry one of its own modules). The kata
process's answers are read by an unpickler that refuses every global: it can build
containers, numbers, strings and bytes, nothing that runs code, and tensors are rebuilt
from the descriptions here. Values that pickle would not carry as data are tagged dicts:
{TAG: kind, ...}.
"""

from __future__ import annotations

import io
import numbers
import pickle
import socket
import struct

import torch

from judge.language import tr

TAG = "§kata"
_HEADER = struct.Struct("<Q")
_DTYPES = {str(dtype): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


MAX_FRAME = 1 << 31  # bytes in one frame: an answer larger than 2 GiB is refused
MAX_DEPTH = 64  # containers nested in an answer
MAX_VALUES = 1 << 22  # values rebuilt from one answer (a pickle can refer to one list many times)


class ChannelClosed(Exception):
    """The other process closed the socket (it exited or was killed)."""


class WireError(TypeError):
    """A value that cannot cross as data (a sparse tensor, say): the message says what to return."""


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    if size > MAX_FRAME:
        raise ChannelClosed(f"the other process sent a frame of {size} bytes, over the {MAX_FRAME}-byte limit")
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other process closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def dump_request(message) -> bytes:
    return _pack(message)


def load_request(payload: bytes):
    return _unpack(pickle.loads(payload))


def dump_answer(message) -> bytes:
    return _pack(message)


def load_answer(payload: bytes):
    return _unpack(_DataOnly(io.BytesIO(payload)).load())


class _DataOnly(pickle.Unpickler):
    """Builds containers, numbers, strings and bytes; any global (a class, a function) is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("builtins", "complex"):
            return complex
        raise pickle.UnpicklingError(f"the kata process sent {module}.{name}, which is not data")


# --------------------------------------------------------------------------- tensors as data


def _pack(message) -> bytes:
    storages: dict = {}
    body = _describe(message, storages)
    return pickle.dumps({"storages": [data for _, data in storages.values()], "body": body}, protocol=5)


def _describe(value, storages: dict):
    if isinstance(value, torch.Tensor):
        return _tensor(value, storages)
    if isinstance(value, torch.dtype):
        return {TAG: "dtype", "name": str(value)}
    if isinstance(value, torch.device):
        return {TAG: "device", "name": str(value)}
    if isinstance(value, torch.Size):
        return {TAG: "size", "dims": list(value)}
    if isinstance(value, tuple):
        return tuple(_describe(v, storages) for v in value)
    if isinstance(value, list):
        return [_describe(v, storages) for v in value]
    if isinstance(value, dict):
        return {k: _describe(v, storages) for k, v in value.items()}
    if isinstance(value, slice):
        return {TAG: "slice", "start": value.start, "stop": value.stop, "step": value.step}
    if value is Ellipsis:
        return {TAG: "ellipsis"}
    if type(value) not in (int, float, complex, bool):  # numpy's numbers pickle as numpy's: made Python's
        for abstract, plain in ((numbers.Integral, int), (numbers.Real, float), (numbers.Complex, complex)):
            if isinstance(value, abstract):
                return plain(value)
    return value


def _tensor(tensor: torch.Tensor, storages: dict) -> dict:
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
        kind = "nested" if tensor.is_nested else "quantized" if tensor.is_quantized else str(tensor.layout)
        raise WireError(
            tr("a {kind} tensor cannot be judged: return a dense tensor (e.g. .to_dense(), .dequantize())", kind=kind)
        )
    tensor = tensor.detach()
    if tensor.is_neg() or tensor.is_conj():  # a lazy negation or conjugation: its storage holds the other values
        tensor = tensor.resolve_neg().resolve_conj()
    out = {
        TAG: "tensor",
        "dtype": str(tensor.dtype),
        "device": str(tensor.device),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "offset": tensor.storage_offset(),
        "requires_grad": False,
        "storage": None,
    }
    if tensor.is_meta:
        return out
    storage = tensor.untyped_storage()
    key = (storage.data_ptr(), str(tensor.device), storage.nbytes())
    if key not in storages:
        raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).cpu()
        storages[key] = (len(storages), raw.numpy().tobytes())
    out["storage"] = storages[key][0]
    return out


def _unpack(message: dict):
    storages = [
        torch.frombuffer(bytearray(data), dtype=torch.uint8).untyped_storage() if data else None
        for data in message["storages"]
    ]
    return _rebuild(message["body"], storages, {"§budget": MAX_VALUES})


def _rebuild(value, storages: list, moved: dict, depth: int = 0):
    moved["§budget"] -= 1
    if depth > MAX_DEPTH or moved["§budget"] < 0:
        raise WireError(
            tr(
                "the answer nests deeper than {depth} levels or holds more than {count} values",
                depth=MAX_DEPTH,
                count=MAX_VALUES,
            )
        )
    depth += 1
    if isinstance(value, dict):
        kind = value.get(TAG)
        if kind == "tensor":
            return _tensor_from(value, storages, moved)
        if kind == "dtype":
            return _DTYPES[value["name"]]
        if kind == "device":
            return torch.device(value["name"])
        if kind == "size":
            return torch.Size(value["dims"])
        if kind == "slice":
            return slice(value["start"], value["stop"], value["step"])
        if kind == "ellipsis":
            return Ellipsis
        if kind == "opaque":
            return Opaque(value["type"], value["text"])
        return {k: _rebuild(v, storages, moved, depth) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rebuild(v, storages, moved, depth) for v in value)
    if isinstance(value, list):
        return [_rebuild(v, storages, moved, depth) for v in value]
    return value


def _tensor_from(value: dict, storages: list, moved: dict) -> torch.Tensor:
    dtype, device = _DTYPES[value["dtype"]], torch.device(value["device"])
    shape, stride, offset = value["shape"], value["stride"], value["offset"]
    if value["storage"] is None:  # "meta": a shape without values
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)
    storage = storages[value["storage"]]
    if storage is None:
        storage = torch.UntypedStorage(0)
    if device.type != "cpu":  # one copy of each storage on the device, so views still share it
        key = (value["storage"], str(device))
        if key not in moved:
            moved[key] = torch.empty(0, dtype=torch.uint8).set_(storage).to(device).untyped_storage()
        storage = moved[key]
    return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)


class Opaque:
    """What the kata returned that is not data (an object of its own): its type's name and repr."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = str(type_name), str(text)

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and (self.type_name, self.text) == (other.type_name, other.text)

    __hash__ = None


def opaque(value) -> dict:
    """A stand-in for an object that is not data (in the kata process): its type's name and repr."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises
        text = f"<{type(value).__name__} object>"
    return {TAG: "opaque", "type": type(value).__name__, "text": text[:200]}


def tagged(kind: str, /, **fields) -> dict:
    return {TAG: kind, **fields}


def tag_of(value) -> str | None:
    return value.get(TAG) if isinstance(value, dict) else None

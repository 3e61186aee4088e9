"""The kata process: loads the learner's file under the guard and serves the judge's calls.

Each request names an operation (load, call, getattr, backward, ...) and its arguments;
each answer carries the result, encoded for the wire, and what the call changed in the
objects the judge mirrors (their tensors, plain attributes and modes), in the arguments
(written in place) and in torch's random state. The objects the kata builds live here, in
a table of handles; the judge holds mirrors of them. When a call records an autograd graph
the judge differentiates through, the graph stays here until the judge asks for its
gradients (`backward`) or lets it go (`end_test`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import traceback
import weakref
from pathlib import Path

import torch
from torch import nn

from judge import forbidden
from judge.loading import load_denied, restore_torch_state
from judge.remote.tensors import Seen, flat_containers, flat_tensors, involved, keys_of, same_kind, tensor_at
from judge.remote.wire import (
    ChannelClosed,
    dump_answer,
    load_request,
    opaque,
    recv_frame,
    send_frame,
    tag_of,
    tagged,
)
from judge.testing.scenarios import run_here

PRINTED_LIMIT = 2000  # characters of what the kata printed during one request passed to the judge
PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


def _unchanged(value, before) -> bool:
    """Whether an encoded plain attribute is what the judge last got (tensors inside: resent)."""
    if type(value) is not type(before) or flat_tensors(value, []):
        return False
    try:
        return bool(value == before)
    except Exception:  # noqa: BLE001 - what cannot be compared is sent again
        return False


def is_data(value, depth: int = 0) -> bool:
    """Plain values and tensors, in lists, tuples and dicts with string keys."""
    if depth > 4:
        return False
    if isinstance(value, (tuple, list)):
        return all(is_data(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_data(v, depth + 1) for k, v in value.items())
    return isinstance(value, (torch.Tensor, *PLAIN))


def _defined_by_the_kata(cls: type, wanted) -> list[str]:
    """Names of the attributes `wanted(value)` picks among those the kata's classes define
    (not object's, nor torch's own classes')."""
    names = set()
    for klass in cls.__mro__:
        if klass in (object, nn.Module) or klass.__module__.startswith("torch."):
            continue
        names |= {name for name, value in vars(klass).items() if wanted(value)}
    return sorted(names)


def methods_of(cls: type) -> list[str]:
    """Functions the kata's class defines (below nn.Module or object), forward excepted."""
    found = _defined_by_the_kata(cls, lambda v: callable(v) or isinstance(v, (staticmethod, classmethod)))
    return [name for name in found if name not in ("forward", "__init__") and not name.startswith("__")]


def properties_of(cls: type) -> list[str]:
    return _defined_by_the_kata(cls, lambda v: isinstance(v, property))


class KataServer:
    def __init__(self, sock):
        self.sock = sock
        self.objects: dict[int, object] = {}
        self.handles: dict[int, int] = {}  # id(object) -> handle
        self.seen = Seen()  # what the judge holds of each object it mirrors
        self.graphs: dict[int, tuple] = {}
        self.kata = None
        self.tests = None  # the kata's test module, for its probes (imported on the first)
        self.test_module = ""
        self.kata_file = ""
        self.baseline: dict = {}
        self.test_start = 0
        self.described: set[int] = set()  # handles of objects the judge mirrors
        self.plain_sent: dict[int, dict] = {}  # id(object) -> the plain attributes the judge last got
        self.adopted: list[tuple[int, object]] = []  # (token, object) the judge passed by value in this call
        self.shared: dict[int, tuple] = {}  # id(tensor) -> (weak reference to it, handle, key) where first described

    # ----------------------------------------------------------------------- the loop

    def serve(self) -> None:
        self.printed = tempfile.TemporaryFile()  # what the kata prints, handed to the judge after each request
        for fd in (1, 2):
            os.dup2(self.printed.fileno(), fd)
        while True:
            try:
                request = load_request(recv_frame(self.sock))
            except ChannelClosed:
                return
            try:
                answer = getattr(self, "op_" + request["op"])(**request["args"])
            except BaseException as error:  # noqa: BLE001 - every failure goes back to the judge
                answer = self.error(error)
            answer["printed"] = self.take_printed()
            try:
                payload = dump_answer(answer)
            except BaseException as error:  # noqa: BLE001 - an answer that cannot be encoded
                payload = dump_answer(self.error(error))
            send_frame(self.sock, payload)

    def take_printed(self) -> str:
        """What the kata printed since the last request, cut to PRINTED_LIMIT characters."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        size = self.printed.seek(0, os.SEEK_END)
        if not size:
            return ""
        self.printed.seek(0)
        text = self.printed.read(PRINTED_LIMIT).decode("utf-8", errors="replace")
        self.printed.seek(0)
        self.printed.truncate()
        return text + (f" ... ({size} bytes in all)" if size > PRINTED_LIMIT else "")

    def error(self, error: BaseException) -> dict:
        """The facts of an exception, for the judge to decide its kind: its class's and base
        classes' names, message, errno, and the kata file's line of each frame (or None)."""
        frames = [
            entry.lineno if entry.filename == self.kata_file else None
            for entry in traceback.extract_tb(error.__traceback__)
        ]
        errno_ = getattr(error, "errno", None)
        return tagged(
            "error",
            names=[cls.__name__ for cls in type(error).__mro__],
            message=str(error),
            errno=errno_ if isinstance(errno_, int) else None,
            frames=frames,
            file=Path(self.kata_file).name,
        )

    # ----------------------------------------------------------------------- operations

    def op_load(
        self, path: str, kata: str, symbols: dict, test_module: str, tests: tuple = (), private_dir: str | None = None
    ) -> dict:
        """Import the kata file under the guard, with the rules the judge sent for its symbols;
        first the kata's test modules (`tests`: (name, sys.path)), whose scenarios run here."""
        self.kata_file, self.test_module = str(Path(path)), test_module
        if tests:
            name, path_list = tests
            sys.path[:] = path_list
            importlib.import_module(name)
        self.kata, self.baseline = load_denied(Path(path), symbols, kata, private_dir)
        return {"kata": self.encode(self.kata, top=True)}

    def op_run(self, module: str, name: str, args, kwargs) -> dict:
        """A scenario of the judge's (judge.testing.scenarios) on the learner's kata."""
        function = scenario_function(module, name)
        return {"value": as_data(run_here(function, self.kata, args, kwargs))}

    def op_getattr(self, handle: int, name: str):
        return {"value": self.encode(getattr(self.objects[handle], name))}

    def op_call(
        self,
        handle: int,
        name: str | None,
        args,
        kwargs,
        sync: dict,
        rng,
        grad: bool,
        bridge: list | None,
        inference: bool,
        watch: list,
        defaults: tuple,
    ) -> dict:
        self.apply_sync(sync)
        self.adopted = []
        torch.set_rng_state(rng)
        generators: list = []
        args, kwargs = self.decode(args, generators), self.decode(kwargs, generators)
        target = self.objects[handle]
        function = target if name is None else getattr(target, name)
        inputs = flat_tensors([args, kwargs], [])
        versions = [t._version for t in inputs]
        containers = flat_containers(args) + flat_containers(kwargs)
        contents = [_content(c) for c in containers]
        hooks = [self.objects[h].register_forward_hook(self.hook_for(h, "hook"), with_kwargs=True) for h in watch]
        hooks += [self.objects[h].register_forward_pre_hook(self.hook_for(h, "pre"), with_kwargs=True) for h in watch]
        device, dtype = defaults  # the judge's defaults around the call (a `with torch.device("meta"):`)
        dtype_before = torch.get_default_dtype()
        try:
            torch.set_default_dtype(dtype)
            with (
                torch.device(device) if device != torch.get_default_device() else contextlib.nullcontext(),
                torch.inference_mode(inference),
                torch.set_grad_enabled(grad or bridge is not None),
            ):
                result = function(*args, **kwargs)
        finally:
            if torch.get_default_dtype() == dtype:  # else the kata changed it: left for end_test to report
                torch.set_default_dtype(dtype_before)
            for hook in hooks:
                hook.remove()
        answer = {"rng": torch.get_rng_state(), "generators": [g.get_state() for g in generators]}
        answer["written"] = {i: t.detach() for i, (t, v) in enumerate(zip(inputs, versions)) if t._version != v}
        answer["refilled"] = {
            i: self.refill(before, c)
            for i, (c, before) in enumerate(zip(containers, contents))
            if _content(c) != before
        }
        answer["sync"] = self.changes(self.involved([target, args, kwargs, result]))
        answer["adopted"] = {token: self.describe(obj, self.register(obj)[0]) for token, obj in self.adopted}
        if bridge is not None:
            outputs = flat_tensors(result, [])
            differentiable = [t.requires_grad for t in outputs]
            leaves = [self.locate(where, inputs) for where in bridge]
            graph = len(self.graphs) + 1
            self.graphs[graph] = ([t for t, d in zip(outputs, differentiable) if d], leaves)
            answer |= {"graph": graph, "differentiable": differentiable}
            answer["result"] = self.encode(result, views=False)
        else:
            answer["result"] = self.encode(result, views=True)
        return answer

    def op_backward(self, graph: int, outputs: list, grads: list) -> dict:
        """Gradients of the call's inputs, through the outputs the judge's loss used (`outputs`:
        their places among the differentiable ones), given theirs."""
        differentiable, leaves = self.graphs[graph]
        outputs = [differentiable[i] for i in outputs]
        wanted = [(i, leaf) for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
        found = [None] * len(leaves)
        if outputs and wanted:
            got = torch.autograd.grad(
                outputs, [leaf for _, leaf in wanted], grads, allow_unused=True, retain_graph=True
            )
            for (i, _), grad in zip(wanted, got):
                found[i] = grad
        return {"grads": found}

    def hook_for(self, handle: int, when: str):
        """A forward hook (or pre-hook) that asks the judge to run its own on the mirror of
        `handle`, and uses what they return instead (the output, or the arguments), if any."""

        def ask(args, kwargs, output=None):
            encoded = [self.encode(value, views=False) for value in (args, kwargs, output)]
            message = tagged(
                "hook",
                h=handle,
                when=when,
                args=encoded[0],
                kwargs=encoded[1],
                output=encoded[2],
                grad=torch.is_grad_enabled(),
            )
            send_frame(self.sock, dump_answer(message))
            reply = load_request(recv_frame(self.sock))
            return self.decode(reply["value"], []) if reply["replaced"] else None

        def hook(module, args, kwargs, output):
            return ask(args, kwargs, output)

        def pre_hook(module, args, kwargs):
            return ask(args, kwargs)

        return hook if when == "hook" else pre_hook

    def op_begin_test(self) -> dict:
        self.test_start = forbidden.trips()
        return {}

    def op_trips(self) -> dict:
        return {"refused": forbidden.TRIPPED[self.test_start :]}

    def op_end_test(self) -> dict:
        """What a test leaves behind here: torch's state changed, a refusal unreported (threads
        left running are counted by the judge, from /proc)."""
        self.graphs.clear()
        restore_torch_state(self.baseline, when="the kata")
        if refused := forbidden.TRIPPED[self.test_start :]:
            raise forbidden.ForbiddenCallError(refused[0])
        return {}

    def op_probe(self, function: str, args, kwargs) -> dict:
        """An observation the judge cannot make from outside, of the kata's own objects (what
        it saves for backward, say): a function of the kata's test module, run here on the
        decoded arguments. Its answer is the kata process's word: values are judged elsewhere."""
        if self.tests is None:  # the test module, imported here only for its probes
            module_spec = importlib.util.spec_from_file_location("kata_probes", self.test_module)
            self.tests = importlib.util.module_from_spec(module_spec)
            sys.modules[module_spec.name] = self.tests
            module_spec.loader.exec_module(self.tests)
        generators: list = []
        value = getattr(self.tests, function)(*self.decode(args, generators), **self.decode(kwargs, generators))
        return {"value": self.encode(value)}

    # ----------------------------------------------------------------------- the judge's values

    def decode(self, value, generators: list):
        kind = tag_of(value)
        if kind == "t":
            data = value["data"]
            return data.requires_grad_() if value["rg"] else data
        if kind == "ref":
            return self.objects[value["h"]]
        if kind == "value":  # one of the judge's own objects, copied here: mirrored by the original
            self.adopted.append((value["token"], value["obj"]))
            return value["obj"]
        if kind == "gen":
            generator = torch.Generator(device=value["device"])
            generator.set_state(value["state"])
            generators.append(generator)
            return generator
        if isinstance(value, tuple):
            return tuple(self.decode(v, generators) for v in value)
        if isinstance(value, list):
            return [self.decode(v, generators) for v in value]
        if isinstance(value, dict):
            return {k: self.decode(v, generators) for k, v in value.items()}
        return value

    def refill(self, before: list, container) -> list:
        """A list or dict argument the kata changed: for each entry, the old one's place (kept
        by the judge as it was) or the new value."""
        old = {ident: i for i, (_, ident) in enumerate(before)}
        entries = container.items() if isinstance(container, dict) else enumerate(container)
        return [
            (key, ("old", old[id(v)]) if id(v) in old else ("new", self.encode(v, views=False))) for key, v in entries
        ]

    def locate(self, where, inputs: list):
        if where is None:
            return None
        if where[0] == "a":
            return inputs[where[1]]
        return getattr(self.objects[where[1]], where[2])

    def apply_sync(self, sync: dict) -> None:
        """The judge's changes to mirrored objects (weights copied in, modes, dtypes)."""
        for handle, state in sync.items():
            obj = self.objects[handle]
            if "training" in state:
                obj.training = state["training"]
            for group in ("params", "buffers", "tensors"):
                for name, (data, requires_grad) in state.get(group, {}).items():
                    current = getattr(obj, name, None)
                    with torch.no_grad():
                        if isinstance(current, torch.Tensor) and same_kind(current, data):
                            current.copy_(data)
                        elif isinstance(current, nn.Parameter) and torch._has_compatible_shallow_copy_type(
                            current, data
                        ):
                            current.data = data
                        elif isinstance(current, nn.Parameter):  # another device type: a new Parameter, as .to() does
                            obj._parameters[name] = nn.Parameter(data, requires_grad=requires_grad)
                        elif group == "buffers":
                            obj._buffers[name] = data
                        else:
                            setattr(obj, name, data)
                    current = getattr(obj, name)
                    if current.requires_grad != requires_grad and current.is_leaf:
                        current.requires_grad_(requires_grad)
            self.seen.remember(handle, obj, keys_of(state))

    # ----------------------------------------------------------------------- the kata's values

    def register(self, obj) -> tuple[int, bool]:
        handle = self.handles.get(id(obj))
        if handle is not None and self.objects.get(handle) is obj:
            return handle, False
        handle = len(self.objects) + 1
        self.objects[handle], self.handles[id(obj)] = obj, handle
        return handle, True

    def encode(self, value, *, views: bool = True, top: bool = False):
        if isinstance(value, torch.Tensor):
            return (self.view_of(value) if views else None) or value.detach()
        if isinstance(value, PLAIN):
            return value
        if isinstance(value, tuple):
            return tuple(self.encode(v, views=views) for v in value)
        if isinstance(value, list):
            return [self.encode(v, views=views) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: self.encode(v, views=views) for k, v in value.items()}
        if isinstance(value, slice):
            return tagged("slice", start=value.start, stop=value.stop, step=value.step)
        handle, _ = self.register(value)
        if isinstance(value, type):
            apply = issubclass(value, torch.autograd.Function)
            return tagged("class", h=handle, name=value.__name__, module=issubclass(value, nn.Module), function=apply)
        if _is_function(value) or (callable(value) and not hasattr(value, "__dict__")):
            bound = getattr(value, "__self__", None)
            apply = isinstance(bound, type) and issubclass(bound, torch.autograd.Function) and value.__name__ == "apply"
            return tagged("fn", h=handle, name=getattr(value, "__name__", "function"), apply=apply)
        return tagged("obj", **self.describe(value, handle, top=top))

    def describe(self, obj, handle: int, *, top: bool = False) -> dict:
        cls = type(obj)
        torch_base = f"{cls.__module__}:{cls.__qualname__}" if cls.__module__.startswith("torch.") else None
        out = {"h": handle, "cls": cls.__name__, "module": isinstance(obj, nn.Module), "torch_base": torch_base}
        if top:
            out["names"] = sorted(name for name in vars(obj) if not name.startswith("__"))
            return out
        out |= self.state_of(obj, handle)
        out["methods"] = methods_of(cls)
        self.seen.remember(handle, obj)
        self.described.add(handle)
        return out

    def tensor_entry(self, tensor, handle: int, key: str):
        """(data, requires_grad); None for a slot registered empty; ("shared", handle, key) for a
        tensor already described elsewhere (a tied weight: the judge's mirror shares it too)."""
        if tensor is None:
            return None
        known = self.shared.get(id(tensor))
        if known is not None and known[0]() is tensor and known[1:] != (handle, key):
            return ("shared", *known[1:])
        self.shared[id(tensor)] = (weakref.ref(tensor), handle, key)
        return (tensor.detach(), tensor.requires_grad)

    def state_of(self, obj, handle: int) -> dict:
        state: dict = {"params": {}, "buffers": {}, "tensors": {}, "plain": {}, "children": {}}
        if isinstance(obj, nn.Module):
            state["training"] = obj.training
            state["params"] = {n: self.tensor_entry(p, handle, f"params.{n}") for n, p in obj._parameters.items()}
            state["buffers"] = {n: self.tensor_entry(b, handle, f"buffers.{n}") for n, b in obj._buffers.items()}
            for name, child in obj._modules.items():
                if child is not None:
                    handle, _ = self.register(child)
                    state["children"][name] = self.describe(child, handle)
        for name, value in list(getattr(obj, "__dict__", {}).items()) + [
            (p, _safe_get(obj, p)) for p in properties_of(type(obj))
        ]:
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                state["tensors"][name] = (value.detach(), value.requires_grad)
        state["plain"] = self.plain_sent[id(obj)] = self.plain_of(obj)
        return state

    def involved(self, roots) -> list[int]:
        """Handles of the mirrored objects reachable from `roots` (their submodules too)."""
        return involved(roots, self.described_handle)

    def described_handle(self, value) -> int | None:
        handle = self.handles.get(id(value))
        if handle is None or self.objects.get(handle) is not value or handle not in self.described:
            return None
        return handle

    def changes(self, handles: list[int]) -> dict:
        """For each object: what changed since the judge last saw it."""
        out = {}
        for handle in handles:
            obj = self.objects[handle]
            keys, mode = self.seen.changed(handle, obj)
            state: dict = {"training": obj.training} if mode else {}
            for key in keys:
                group, name = key.split(".", 1)
                tensor = tensor_at(obj, key)
                graph = type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else None
                moved = self.seen.moved(handle, obj, key)
                state.setdefault(group, {})[name] = (tensor.detach(), tensor.requires_grad, moved, graph)
            plain = self.plain_of(obj)
            before = self.plain_sent.get(id(obj), {})
            if changed := {name: v for name, v in plain.items() if not _unchanged(v, before.get(name))}:
                state["plain"] = changed
            self.plain_sent[id(obj)] = plain
            if state:
                out[handle] = state
                self.seen.remember(handle, obj, keys)
        return out

    def plain_of(self, obj) -> dict:
        """An object's public attributes made of plain values and tensors (in lists, tuples,
        dicts): what the judge reads back (a counter, a list of recorded calls)."""
        plain = {}
        for name, value in list(getattr(obj, "__dict__", {}).items()) + [
            (p, _safe_get(obj, p)) for p in properties_of(type(obj))
        ]:
            if (
                not name.startswith("_")
                and name != "training"
                and not isinstance(value, torch.Tensor)
                and is_data(value)
            ):
                plain[name] = self.encode(value, views=False)
        return plain

    def view_of(self, tensor: torch.Tensor):
        """A tensor that shares storage with a mirrored object's tensor: sent as a view of it."""
        if tensor.is_meta or tensor.untyped_storage().nbytes() == 0:
            return None
        pointer = tensor.untyped_storage().data_ptr()
        for handle, prints in self.seen.prints.items():
            for key, print_ in prints.items():
                if key != "training" and print_[1] == pointer:
                    return tagged(
                        "view",
                        h=handle,
                        key=key,
                        offset=tensor.storage_offset(),
                        size=tuple(tensor.shape),
                        stride=tensor.stride(),
                    )
        return None


def scenario_function(module: str, qualname: str):
    """The function of a scenario the judge names (a test module's, imported at load, or judge.testing's)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return getattr(found, "function", found)


def as_data(value, depth: int = 0):
    """A scenario's result as data: any other object becomes an opaque stand-in that names its type."""
    if isinstance(value, (torch.Tensor, *PLAIN)) or value is Ellipsis or isinstance(value, slice):
        return value
    if depth < 32 and isinstance(value, (tuple, list)):
        items = [as_data(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if depth < 32 and isinstance(value, dict):
        return {k if isinstance(k, (str, int)) else repr(k): as_data(v, depth + 1) for k, v in value.items()}
    return opaque(value)


def _content(container) -> list:
    entries = container.items() if isinstance(container, dict) else enumerate(container)
    return [(key, id(value)) for key, value in entries]


def _is_function(value) -> bool:
    return callable(value) and type(value).__name__ in ("function", "method", "builtin_function_or_method", "partial")


def _safe_get(obj, name: str):
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001 - a property that raises is left out
        return None


def serve(sock) -> None:
    """The kata process's main: serve until the judge closes the socket, then leave."""
    KataServer(sock).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

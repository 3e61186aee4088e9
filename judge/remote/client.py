"""The judging process's view of the kata: proxies that call into the kata process.

`RemoteKata` stands for the learner's module: its functions and classes are proxies whose
calls run in the kata process, under the guard. An object the kata builds (an nn.Module, a
cache) comes back as a mirror: a real nn.Module (or plain object) here with the same class
name, submodules, parameters, buffers, tensor and plain attributes, whose forward and
methods run over there. Before each call the judge's changes to the mirrors involved
(weights copied in, dtype or device changed, train/eval) go across; after it the kata's
changes come back: written in place where the kata wrote in place, replaced where it
replaced a tensor, so storage checks see what the kata did. A tensor the kata returns that
is a view of a mirrored tensor comes back as the same view of the mirror. Gradients flow
through an autograd.Function (`_Bridge`) whose backward asks the kata process for them.
"""

from __future__ import annotations

import builtins
import faulthandler
import os
import signal
import sys
import tempfile
import threading
import time

import torch
from torch import nn

from judge.failures import ThreadLeftRunning, failure_text, kind_of
from judge.forbidden import ForbiddenCallError
from judge.isolation import ATTACKED, exit_reason
from judge.loading import KataLoadError, TorchStateChanged
from judge.remote.tensors import Seen, flat_containers, flat_tensors, involved, keys_of, same_kind, tensor_at
from judge.remote.wire import (
    ChannelClosed,
    dump_request,
    load_answer,
    recv_frame,
    send_frame,
    tag_of,
    tagged,
)
from judge.remote.zygote import Zygote
from judge.testing.scenarios import Elsewhere

_BUILTIN_ERRORS = {
    name: value for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Exception)
}
_JUDGE_ERRORS = {
    "ForbiddenCallError": ForbiddenCallError,
    "KataLoadError": KataLoadError,
    "TorchStateChanged": TorchStateChanged,
    "OutOfMemoryError": torch.OutOfMemoryError,
}
THREAD_GRACE = 0.5  # seconds a thread the kata started may take to finish after a test
_pending = threading.local()


class KataDied(Exception):
    """The kata process ended in the middle of a call."""


def rebuild_error(answer: dict) -> BaseException:
    """The kata's exception as the judge raises it, from the facts the kata process sent (see
    KataServer.error): its kind decided here (failures.kind_of); the same class where it is a
    builtin (so `except ValueError` works) or one of the judge's few, else a RuntimeError of
    its name; `kata_error` carries the kind and the message the learner reads."""
    names, message = [str(n) for n in answer["names"]] or ["Exception"], str(answer["message"])
    frames = [line if isinstance(line, int) else None for line in answer["frames"]]
    kind = kind_of(names, message, answer["errno"], frames)
    lines = [line for line in frames if line is not None]
    where = f" (raised at {answer['file']}, line {lines[-1]})" if lines else ""
    name = names[0]
    cls = _JUDGE_ERRORS.get(name) or _BUILTIN_ERRORS.get(name)
    try:
        errno_ = answer["errno"]
        error = cls(errno_, message) if errno_ is not None and issubclass(cls, OSError) else cls(message)
    except Exception:  # noqa: BLE001 - no such class, or one with another signature
        error = type(name, (RuntimeError,), {"__module__": "kata"})(message)
    error.kata_error = (kind, name, failure_text(kind, name, message, where))
    return error


def threads_of(pid: int) -> dict[int, str]:
    """{thread id: name} of a process, from /proc (measured from outside it)."""
    found = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as comm:
                    found[int(tid)] = comm.read().strip()
            except OSError:
                continue
    except OSError:
        pass
    return found


def mirror_death(status: int) -> None:
    """End this process the way the kata process ended, so the grader reads the same
    verdict as when both were one process (a crash, its signal or exit code)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        faulthandler.disable()
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        time.sleep(1)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _record_a_graph(p: torch.Tensor) -> None:
    """Make `p` hold a grad_fn, as the kata's tensor does (an in-place op that recorded a graph)."""
    with torch.enable_grad():
        if p.is_leaf and p.requires_grad:
            p.requires_grad_(False)
        p.add_(torch.zeros((), dtype=p.dtype, device=p.device, requires_grad=True))


class RemoteFunction:
    def __init__(self, process: KataProcess, handle: int, name: str, apply: bool = False, owner=None):
        self._process, self._handle, self.__name__, self._apply, self._owner = process, handle, name, apply, owner

    def __call__(self, *args, **kwargs):
        return self._process.call(self._handle, None, args, kwargs, apply=self._apply)

    def __repr__(self) -> str:
        return f"<kata function {self.__name__}>"


class RemoteClass:
    def __init__(self, process: KataProcess, handle: int, name: str, module: bool, function: bool):
        self._process, self._handle, self.__name__ = process, handle, name
        self.__qualname__ = name
        self._module, self._function = module, function
        self._attributes: dict = {}

    def __call__(self, *args, **kwargs):
        return self._process.call(self._handle, None, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._attributes:
            self._attributes[name] = self._process.getattr(self._handle, name)
        return self._attributes[name]

    def __repr__(self) -> str:
        return f"<kata class {self.__name__}>"


class RemoteMethod:
    def __init__(self, owner, name: str):
        self._owner, self.__name__ = owner, name

    def __call__(self, *args, **kwargs):
        return self._owner._kata_process.call(self._owner._kata_handle, self.__name__, args, kwargs)


class Mirror(nn.Module):
    """Stands for an nn.Module the kata built; its forward runs in the kata process."""

    _kata_methods: tuple = ()

    def forward(self, *args, **kwargs):
        return self._kata_process.call(self._kata_handle, "__call__", args, kwargs)

    def __getattr__(self, name: str):
        try:
            return nn.Module.__getattr__(self, name)
        except AttributeError:
            if name in type(self)._kata_methods:
                return RemoteMethod(self, name)
            raise


class MirrorObject:
    """Stands for any other object the kata built (a cache, say)."""

    _kata_methods: tuple = ()

    def __getattr__(self, name: str):
        if name in type(self)._kata_methods:
            return RemoteMethod(self, name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class RemoteKata(Elsewhere):
    """The learner's module as the tests see it: scenarios run in the kata process (and, until
    every test runs scenarios, each attribute fetched from it)."""

    def __init__(self, process: KataProcess, description: dict):
        self._process, self._handle = process, description["h"]
        self._names = description.get("names", [])
        self._attributes: dict = {}

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._attributes:
            self._attributes[name] = self._process.getattr(self._handle, name)
        return self._attributes[name]

    def __dir__(self):
        return list(self._names)

    def run(self, function, args: tuple, kwargs: dict):
        """A scenario (judge.testing.scenarios) run in the kata process on copies of its data."""
        answer = self._process.request(
            "run", module=function.__module__, name=function.__qualname__, args=args, kwargs=kwargs
        )
        return answer["value"]


class _Bridge(torch.autograd.Function):
    """A call whose inputs need gradients: forward asks the kata process for the result (it
    keeps the graph), backward asks it for the gradients of the inputs."""

    @staticmethod
    def forward(ctx, *inputs):
        process, request = _pending.call
        answer = process.request("call", **request)
        _pending.answer = answer
        outputs = flat_tensors(answer["result"], [])
        ctx.process, ctx.graph, ctx.differentiable = process, answer["graph"], answer["differentiable"]
        ctx.mark_non_differentiable(*[t for t, d in zip(outputs, ctx.differentiable) if not d])
        ctx.set_materialize_grads(False)  # an output the loss never used sends no gradient, as in one process
        ctx.inputs = len(inputs)
        return tuple(outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        used = [(i, g) for i, g in enumerate(g for g, d in zip(grads, ctx.differentiable) if d) if g is not None]
        if not used:
            return (None,) * ctx.inputs
        answer = ctx.process.request(
            "backward", graph=ctx.graph, outputs=[i for i, _ in used], grads=[g for _, g in used]
        )
        return tuple(answer["grads"])


# --------------------------------------------------------------------------- the kata process


class KataProcess:
    """One kata process, as the judge talks to it."""

    def __init__(self, zygote: Zygote, *, mirror_death: bool):
        self.zygote, self.mirror_death = zygote, mirror_death
        self.sock, self.pid = zygote.spawn()
        self.mirrors: dict[int, object] = {}
        self.seen = Seen()  # what the kata process holds of each mirrored object
        self.classes: dict[tuple, type] = {}
        self.origins: dict[int, object] = {}  # token -> one of the judge's objects passed by value
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        if getattr(self, "private", None) is not None:
            self.private.cleanup()

    def request(self, op: str, **args):
        if self.closed:
            raise KataDied("the kata process was let go: the tests of this kata are over")
        try:
            send_frame(self.sock, dump_request({"op": op, "args": args}))
            answer = load_answer(recv_frame(self.sock))
            while tag_of(answer) == "hook":  # a mirrored submodule ran: the judge's hooks on it run now
                send_frame(self.sock, dump_request(self.run_hooks(answer)))
                answer = load_answer(recv_frame(self.sock))
        except (ChannelClosed, OSError):
            self.died()
        if answer.get("printed"):  # shown as this process's output: pytest captures it with the test
            sys.stdout.write(answer["printed"])
        if op == "end_test" and not self.zygote.alive():  # the kata killed its parent, our fork server
            self.attacked()
        if tag_of(answer) == "error":
            raise rebuild_error(answer)
        return answer

    def run_hooks(self, call: dict) -> dict:
        """The forward hooks (or pre-hooks) the judge put on a mirror, on what its module got
        (and returned) in the kata process; what they return instead goes back to be used there."""
        mirror = self.mirrors[call["h"]]
        args, kwargs, output = self.decode(call["args"]), self.decode(call["kwargs"]), self.decode(call["output"])
        with torch.set_grad_enabled(call["grad"]):  # as the module ran over there
            return self._run_hooks(mirror, call, args, kwargs, output)

    def _run_hooks(self, mirror, call: dict, args, kwargs, output) -> dict:
        replaced = False
        if call["when"] == "pre":
            for key, hook in list(mirror._forward_pre_hooks.items()):
                if key in mirror._forward_pre_hooks_with_kwargs:
                    got = hook(mirror, args, kwargs)
                    if got is not None:
                        (args, kwargs), replaced = got, True
                else:
                    got = hook(mirror, args)
                    if got is not None:
                        args, replaced = (got if isinstance(got, tuple) else (got,)), True
            value = (args, kwargs)
        else:
            for key, hook in list(mirror._forward_hooks.items()):
                with_kwargs = key in mirror._forward_hooks_with_kwargs
                got = hook(mirror, args, kwargs, output) if with_kwargs else hook(mirror, args, output)
                if got is not None:
                    output, replaced = got, True
            value = output
        return {"replaced": replaced, "value": self.encode(value, []) if replaced else None}

    def attacked(self):
        if self.mirror_death:
            sys.stdout.flush()
            os._exit(ATTACKED)
        raise KataDied("the kata killed the fork server of kata processes, its parent")

    def died(self):
        status = self.zygote.status(self.pid)
        if self.mirror_death and status is not None:
            mirror_death(status)
        reason = exit_reason(os.waitstatus_to_exitcode(status) if status is not None else None)
        raise KataDied(f"the kata process died ({reason})")

    def begin_test(self) -> None:
        self.threads_at_start = threads_of(self.pid)
        self.request("begin_test")

    def end_test(self) -> None:
        """What the kata left behind: torch's state changed or a refusal (the kata process says),
        a thread still running (counted here, from /proc, after a short grace)."""
        self.request("end_test")
        deadline = time.monotonic() + THREAD_GRACE
        while (started := set(threads_of(self.pid)) - set(self.threads_at_start)) and time.monotonic() < deadline:
            time.sleep(0.01)
        if started and not self.closed and threads_of(self.pid):
            names = ", ".join(sorted({threads_of(self.pid).get(tid, "?") for tid in started})[:3])
            raise ThreadLeftRunning(
                f"the kata left {len(started)} thread(s) running after the call ({names}): everything it "
                "computes must be done when it returns; join the threads it starts (or use `with` on an executor)"
            )

    def load(self, path: str, kata: str, symbols: dict, test_module: str, tests: tuple = ()) -> RemoteKata:
        """Have the kata process import the kata file, with what its symbols' rules forbid
        removed and inside the sandbox (its own temp dir, removed on close), after the test
        module `tests` = (name, sys.path), whose scenarios run there."""
        self.private = tempfile.TemporaryDirectory(prefix="kata-tmp-")
        description = self.request(
            "load",
            path=path,
            kata=kata,
            symbols=symbols,
            test_module=test_module,
            tests=tests,
            private_dir=self.private.name,
        )["kata"]
        return RemoteKata(self, description)

    def probe(self, function, *args, **kwargs):
        """function(*args, **kwargs) run in the kata process (a function of the test module)."""
        generators: list = []
        value = self.request(
            "probe",
            function=function.__name__,
            args=self.encode(args, generators),
            kwargs=self.encode(kwargs, generators),
        )["value"]
        return self.decode(value)

    def getattr(self, handle: int, name: str):
        return self.decode(self.request("getattr", handle=handle, name=name)["value"])

    # ----------------------------------------------------------------------- calls

    def call(self, handle: int, name: str | None, args: tuple, kwargs: dict, *, apply: bool = False):
        generators: list = []
        roots = [self.mirrors.get(handle), args, kwargs]
        mirrored = self.involved(roots)
        flat = flat_tensors([args, kwargs], [])
        containers = flat_containers(args) + flat_containers(kwargs)
        contents = [list(c.values()) if isinstance(c, dict) else list(c) for c in containers]
        request = {
            "handle": handle,
            "name": name,
            "args": self.encode(args, generators),
            "kwargs": self.encode(kwargs, generators),
            "sync": self.changes(mirrored),
            "rng": torch.get_rng_state(),
            "grad": torch.is_grad_enabled(),
            "inference": torch.is_inference_mode_enabled(),
            "defaults": (torch.get_default_device(), torch.get_default_dtype()),  # `with torch.device("meta"):`
            "bridge": None,
            "watch": [
                h
                for h in mirrored
                if getattr(self.mirrors[h], "_forward_hooks", None)
                or getattr(self.mirrors[h], "_forward_pre_hooks", None)
            ],
        }
        inputs, where = self.bridge_inputs(args, flat, mirrored, apply)
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            request["bridge"] = where
            _pending.call = (self, request)
            outputs = iter(_Bridge.apply(*inputs))
            answer = _pending.answer
            self.after(answer, flat, generators, containers, contents)
            return self.decode(answer["result"], outputs)
        answer = self.request("call", **request)
        self.after(answer, flat, generators, containers, contents)
        return self.decode(answer["result"])

    def bridge_inputs(self, args: tuple, flat: list, involved: list[int], apply: bool):
        """What gradients are asked for: the tensors passed that need them and the mirrored
        parameters that need them; for an autograd.Function's apply, exactly its arguments."""
        index = {id(t): i for i, t in enumerate(flat)}
        if apply:
            return list(args), [("a", index[id(a)]) if isinstance(a, torch.Tensor) else None for a in args]
        inputs = [t for t in flat if t.requires_grad]
        where = [("a", index[id(t)]) for t in inputs]
        seen = {id(t) for t in inputs}
        for handle in involved:
            mirror = self.mirrors[handle]
            if isinstance(mirror, nn.Module):
                for name, p in mirror._parameters.items():
                    if p is not None and p.requires_grad and id(p) not in seen:  # a tied weight once
                        seen.add(id(p))
                        inputs.append(p)
                        where.append(("p", handle, name))
        return inputs, where

    def after(self, answer: dict, flat: list, generators: list, containers: list, contents: list) -> None:
        for token, description in answer["adopted"].items():  # the judge's own objects, as the call left them
            self.mirror(description, adopt=self.origins[token])
        for handle, state in answer["sync"].items():
            if handle in self.mirrors:
                self.apply_state(self.mirrors[handle], state)

        torch.set_rng_state(answer["rng"])
        for generator, state in zip(generators, answer["generators"]):
            generator.set_state(state)
        with torch.no_grad():
            for index, value in answer["written"].items():
                if same_kind(flat[index], value) or flat[index].shape == value.shape:
                    flat[index].copy_(value)
        for index, entries in answer["refilled"].items():  # a list or dict argument the kata changed
            container, before = containers[index], contents[index]
            values = {key: before[where[1]] if where[0] == "old" else self.decode(where[1]) for key, where in entries}
            if isinstance(container, list):
                container[:] = [values[i] for i in range(len(values))]
            else:
                container.clear()
                container.update(values)

    # ----------------------------------------------------------------------- values

    def encode(self, value, generators: list):
        if getattr(value, "_kata_process", None) is self:  # a mirror
            return tagged("ref", h=value._kata_handle)
        if isinstance(value, nn.Module):  # one of the judge's own: copied across, and known again if kept
            self.origins[id(value)] = value
            return tagged("value", token=id(value), obj=value)
        if isinstance(value, (RemoteFunction, RemoteClass)):
            return tagged("ref", h=value._handle)
        if isinstance(value, torch.Tensor):
            return tagged("t", data=value.detach(), rg=value.requires_grad)
        if isinstance(value, torch.Generator):
            generators.append(value)
            return tagged("gen", state=value.get_state(), device=str(value.device))
        if isinstance(value, tuple):
            return tuple(self.encode(v, generators) for v in value)
        if isinstance(value, list):
            return [self.encode(v, generators) for v in value]
        if isinstance(value, dict):
            return {k: self.encode(v, generators) for k, v in value.items()}
        return value

    def decode(self, value, tensors=None):
        if isinstance(value, torch.Tensor):
            return next(tensors) if tensors is not None else value
        kind = tag_of(value)
        if kind == "obj":
            return self.mirror(value)
        if kind == "class":
            return RemoteClass(self, value["h"], value["name"], value["module"], value["function"])
        if kind == "fn":
            return RemoteFunction(self, value["h"], value["name"], value["apply"])
        if kind == "view":
            return self.view(value)
        if kind == "slice":
            return slice(value["start"], value["stop"], value["step"])
        if isinstance(value, tuple):
            return tuple(self.decode(v, tensors) for v in value)
        if isinstance(value, list):
            return [self.decode(v, tensors) for v in value]
        if isinstance(value, dict):
            return {k: self.decode(v, tensors) for k, v in value.items()}
        return value

    def view(self, value: dict) -> torch.Tensor:
        base = tensor_at(self.mirrors[value["h"]], value["key"])
        return base.detach().as_strided(value["size"], value["stride"], value["offset"])

    # ----------------------------------------------------------------------- mirrors

    def mirror_class(self, description: dict) -> type:
        key = (description["cls"], description["module"], description["torch_base"], tuple(description["methods"]))
        if key not in self.classes:
            bases: tuple = (Mirror,) if description["module"] else (MirrorObject,)
            if description["torch_base"]:
                import importlib

                module, _, qualname = description["torch_base"].partition(":")
                try:
                    torch_class = importlib.import_module(module)
                    for part in qualname.split("."):
                        torch_class = getattr(torch_class, part)
                    bases = (*bases, torch_class)
                except (ImportError, AttributeError):
                    pass
            attributes = {"_kata_methods": tuple(description["methods"]), "__module__": "kata"}
            self.classes[key] = type(description["cls"], bases, attributes)
        return self.classes[key]

    def mirror(self, description: dict, adopt=None):
        handle = description["h"]
        mirror = self.mirrors.get(handle)
        if mirror is None and adopt is not None:  # one of the judge's own objects stands for its copy
            mirror = adopt
            object.__setattr__(mirror, "_kata_process", self)
            object.__setattr__(mirror, "_kata_handle", handle)
            self.mirrors[handle] = mirror
        if mirror is None:
            cls = self.mirror_class(description)
            mirror = cls.__new__(cls)
            if description["module"]:
                nn.Module.__init__(mirror)
            object.__setattr__(mirror, "_kata_process", self)
            object.__setattr__(mirror, "_kata_handle", handle)
            self.mirrors[handle] = mirror
        self.apply_state(mirror, description)
        return mirror

    def apply_state(self, mirror, state: dict) -> None:
        """The kata's side of a mirrored object, as it is now."""
        with torch.no_grad():
            for name, entry in state.get("params", {}).items():
                if entry is None or entry[0] == "shared":
                    mirror._parameters[name] = None if entry is None else tensor_at(self.mirrors[entry[1]], entry[2])
                    continue
                data, requires_grad, moved = entry[0], entry[1], entry[2] if len(entry) > 2 else True
                p = mirror._parameters.get(name)
                if p is None:
                    mirror._parameters[name] = nn.Parameter(data, requires_grad=requires_grad)
                    continue
                if not torch._has_compatible_shallow_copy_type(p, data):  # another device type, as .to() does
                    mirror._parameters[name] = p = nn.Parameter(data, requires_grad=requires_grad)
                elif moved or not same_kind(p, data):
                    p.data = data
                else:
                    p.copy_(data)
                graph = entry[3] if len(entry) > 3 else None
                if graph is not None and p.grad_fn is None:
                    _record_a_graph(p)
                elif p.is_leaf and p.requires_grad != requires_grad:
                    p.requires_grad_(requires_grad)
            for name, entry in state.get("buffers", {}).items():
                if entry is None or entry[0] == "shared":
                    mirror._buffers[name] = None if entry is None else tensor_at(self.mirrors[entry[1]], entry[2])
                    continue
                data, moved = entry[0], entry[2] if len(entry) > 2 else True
                b = mirror._buffers.get(name)
                if b is None or moved or not same_kind(b, data):
                    mirror._buffers[name] = data
                else:
                    b.copy_(data)
            for name, entry in state.get("tensors", {}).items():
                data, requires_grad, moved = entry[0], entry[1], entry[2] if len(entry) > 2 else True
                current = vars(mirror).get(name)
                if not isinstance(current, torch.Tensor) or moved or not same_kind(current, data):
                    vars(mirror)[name] = data.requires_grad_(requires_grad) if requires_grad else data
                else:
                    current.copy_(data)
        for name, value in state.get("plain", {}).items():
            vars(mirror)[name] = self.decode(value)
        adopted = not isinstance(mirror, (Mirror, MirrorObject))
        for name, child in state.get("children", {}).items():
            mirror._modules[name] = self.mirror(child, adopt=mirror._modules.get(name) if adopted else None)
        if "training" in state:
            mirror.training = state["training"]
        self.seen.remember(mirror._kata_handle, mirror, keys_of(state))

    def involved(self, roots) -> list[int]:
        """Handles of the mirrors reachable from `roots` (their submodules too)."""
        return involved(roots, lambda v: v._kata_handle if getattr(v, "_kata_process", None) is self else None)

    def changes(self, handles: list[int]) -> dict:
        """The judge's changes to mirrored objects since the kata process last heard of them."""
        out = {}
        for handle in handles:
            mirror = self.mirrors[handle]
            keys, mode = self.seen.changed(handle, mirror)
            state: dict = {"training": mirror.training} if mode else {}
            for key in keys:
                group, name = key.split(".", 1)
                tensor = tensor_at(mirror, key)
                state.setdefault(group, {})[name] = (tensor.detach(), tensor.requires_grad)
            if state:
                out[handle] = state
                self.seen.remember(handle, mirror, keys)
        return out


def observe(implementation, function, *args, **kwargs):
    """function(*args, **kwargs) where the implementation's code runs: in the kata process
    for the learner's kata (for what only that process can see, such as the tensors the
    kata saves for backward), here for a known slip's."""
    if isinstance(implementation, RemoteKata):
        return implementation._process.probe(function, *args, **kwargs)
    return function(*args, **kwargs)

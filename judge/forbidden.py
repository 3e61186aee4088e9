"""What a kata may not call (the very thing it asks you to write), and the guard that sees it.

A kata's spec names one rule set. While the kata's own code runs (never while a test
computes its reference), the guard keeps these nets out:
- a TorchFunctionMode sees torch-level calls such as F.scaled_dot_product_attention, also
  through an alias, torch._C._nn or torch.ops.aten; at each call it also looks up the
  Python stack for code the kata may not run (nn.TransformerEncoderLayer._sa_block borrowed
  unbound, say), however that code was reached, and, for the backward katas, refuses any
  result that records an autograd graph;
- a TorchDispatchMode sees the aten kernels underneath (their names differ under
  inference mode, so rules match substrings), which DisableTorchFunction does not hide;
- Python-level entry points (autograd's engine) are replaced, before the kata's file is
  imported, by checkpoints that trip while a guard is on: an alias the kata binds at import,
  in a default argument say, is the checkpoint too;
- a structural check refuses forbidden submodules (nn.MultiheadAttention, nn.Transformer*).
The kata's public function, module class or autograd.Function (its forward and backward)
runs under the guard, and so does every thread started while it runs or while the kata's
file is imported (a worker thread, an executor's pool): the guard follows the thread.
Escape hatches that switch the modes off are refused twice: by an AST scan when the file
loads (names written out), and by tripwires put in their place before the import (names
computed at run time, `getattr(torch, "_" + "C")`), which trip when called from outside
torch while a guard is on. Every trip is also recorded for the process, so a refusal that
the kata swallows, or that happens in its thread, still fails the test. These nets catch
honest shortcuts and the known tricks, not determined adversaries (code compiled under
torch's own file name, say).
"""

from __future__ import annotations

import _thread
import ast
import functools
import importlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.modules.transformer
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode  # private, but the only dispatch-level hook


class ForbiddenCallError(Exception):
    """The kata called something its task forbids. The grader's verdict: forbidden."""


# (owner, attribute, the name shown to the learner); an owner given as "module" or
# "module:Class" is imported only when a guard needs it (torch.nn.attention.bias pulls in
# torch._dynamo), and the rules pickle by name (the judge sends them to the kata process).
Site = tuple[object, str, str]


@dataclass(frozen=True)
class Rules:
    functions: tuple[str, ...] = ()  # torch function names, as the function mode sees them
    kernels: tuple[str, ...] = ()  # substrings of aten kernel names, as the dispatch mode sees them
    modules: tuple[type, ...] = ()  # submodule types a kata module may not contain
    python: tuple[Site, ...] = ()  # entry points swapped for tripwires while the kata runs
    code: tuple[Site, ...] = ()  # Python functions whose code may not run under the kata's call
    no_graph: bool = False  # nothing the kata computes may record an autograd graph
    why: str = ""

    def __add__(self, other: Rules) -> Rules:
        return Rules(
            self.functions + other.functions,
            self.kernels + other.kernels,
            self.modules + other.modules,
            self.python + other.python,
            self.code + other.code,
            self.no_graph or other.no_graph,
            other.why or self.why,
        )

    @property
    def needs_function_mode(self) -> bool:
        return bool(self.functions or self.kernels or self.code or self.no_graph)


NONE = Rules()

_LAYERS = (
    nn.TransformerEncoderLayer,
    nn.TransformerDecoderLayer,
    nn.TransformerEncoder,
    nn.TransformerDecoder,
    nn.Transformer,
    nn.MultiheadAttention,
)
# Every PyTorch implementation of attention, under every name: the function, the aten
# kernels, the modules, and the modules' Python code borrowed unbound on another module.
ATTENTION = Rules(
    functions=("scaled_dot_product_attention", "multi_head_attention_forward"),
    kernels=(
        "scaled_dot_product",
        "flash_attention",
        "efficient_attention",
        "_fused_sdp",
        "cudnn_attention",
        "multi_head_attention",
        "_transformer_encoder_layer_fwd",
    ),
    modules=_LAYERS,
    code=tuple(
        (layer, name, f"nn.{layer.__name__}.{name}")
        for layer in _LAYERS
        for name in ("forward", "_sa_block", "_mha_block", "_ff_block")
        if name in vars(layer)
    ),
    why="this kata asks you to write attention yourself",
)
_ENGINE = "autograd (torch.autograd.grad, .backward() or torch.func)"
AUTOGRAD = Rules(
    kernels=("_backward", "_make_dual"),  # autograd's kernels (softmax_backward_data & co), forward-mode AD
    python=(
        ("torch.autograd", "_engine_run_backward", _ENGINE),
        ("torch.autograd.graph", "_engine_run_backward", _ENGINE),
    ),
    no_graph=True,
    why="this kata asks you to derive the gradients by hand",
)
_CAUSAL_BIAS = "torch.nn.attention.bias:CausalBias"
CAUSAL_MASK = Rules(
    code=(
        (nn.Transformer, "generate_square_subsequent_mask", "nn.Transformer.generate_square_subsequent_mask"),
        (
            "torch.nn.modules.transformer",
            "_generate_square_subsequent_mask",
            "nn.Transformer.generate_square_subsequent_mask",
        ),
        (_CAUSAL_BIAS, "_materialize", "torch.nn.attention.bias.causal_upper_left"),
        (_CAUSAL_BIAS, "_upper_left", "torch.nn.attention.bias.causal_upper_left"),
        (_CAUSAL_BIAS, "_lower_right", "torch.nn.attention.bias.causal_lower_right"),
    ),
    why="this kata asks you to build that mask yourself",
)

RMS_NORM = Rules(
    functions=("rms_norm", "_fused_rms_norm"),
    kernels=("rms_norm",),
    modules=(nn.RMSNorm,),
    code=((nn.RMSNorm, "forward", "nn.RMSNorm.forward"),),
    why="this kata asks you to write RMSNorm yourself",
)

SOFTMAX = Rules(
    functions=("softmax", "log_softmax", "special_softmax", "special_log_softmax", "logsumexp", "special_logsumexp"),
    kernels=("softmax", "logsumexp"),
    why="this kata asks you to write the (log-)softmax yourself",
)
CROSS_ENTROPY = SOFTMAX + Rules(
    functions=("cross_entropy", "nll_loss", "nll_loss2d", "nll_loss_nd"),
    kernels=("nll_loss", "cross_entropy"),
    modules=(nn.CrossEntropyLoss, nn.NLLLoss),
    why="this kata asks you to write the cross-entropy yourself",
)
LAYER_NORM = Rules(
    functions=("layer_norm", "native_layer_norm"),
    kernels=("layer_norm",),
    modules=(nn.LayerNorm,),
    code=((nn.LayerNorm, "forward", "nn.LayerNorm.forward"),),
    why="this kata asks you to write the layer norm yourself",
)

# Names that switch the detection off or reach below it; no kata needs them.
ESCAPE_HATCHES = (
    "_C",
    "_disable_current_modes",
    "DisableTorchFunction",
    "DisableTorchFunctionSubclass",
    "_python_dispatch",
    "_execution_engine",
    "_push_mode",
    "_pop_mode",
    "_set_torch_function_mode",
)


# The same hatches as objects, for names computed at run time: each is replaced by a
# tripwire that trips when called from outside torch (and the judge) while a guard is on.
ESCAPE_SITES = (
    ("torch._C", "DisableTorchFunction"),
    ("torch._C", "DisableTorchFunctionSubclass"),
    ("torch._C", "_DisableTorchDispatch"),
    ("torch._C", "_pop_torch_function_stack"),
    ("torch._C", "_pop_torch_dispatch_stack"),
    ("torch._C", "_set_torch_function_mode"),
    ("torch.overrides", "_pop_mode"),
    ("torch.overrides", "_pop_mode_temporarily"),
    ("torch.utils._python_dispatch", "_disable_current_modes"),
    ("torch.utils._python_dispatch", "_pop_mode"),
    ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
)
# Code under these folders may switch modes off: torch's own, and the judge's.
TRUSTED_FOLDERS = tuple(
    os.path.dirname(os.path.realpath(m.__file__)) + os.sep for m in (torch, sys.modules[__package__ or "judge"])
)


def scan_escape_hatches(path: Path) -> list[tuple[int, str]]:
    """(line, name) for each escape-hatch name the file mentions (attribute, import or name)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []  # the import itself reports these
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [part for alias in node.names for part in alias.name.split(".")]
            names += (node.module or "").split(".") if isinstance(node, ast.ImportFrom) else []
        found += [(node.lineno, name) for name in names if name in ESCAPE_HATCHES]
    return sorted(found)


def refuse_escape_hatches(path: Path, kata_name: str) -> None:
    hatches = scan_escape_hatches(path)
    if hatches:
        line, name = hatches[0]
        raise ForbiddenCallError(
            f"{path.name} uses {name} (line {line}), which reaches around the grader's checks; no kata needs it"
        )


def _resolve(owner):
    """An owner given by name ("module" or "module:Class") imported, so rules pickle by name."""
    if not isinstance(owner, str):
        return owner
    module, _, name = owner.partition(":")
    found = importlib.import_module(module)
    return functools.reduce(getattr, name.split("."), found) if name else found


def _function_of(raw):
    return raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw


def _raw(owner, attribute: str):
    owner = _resolve(owner)
    return vars(owner).get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)


@functools.lru_cache(maxsize=4096)
def _kernel_hit(kernels: tuple[str, ...], func) -> bool:
    """Whether a torch function's name contains a forbidden kernel's (cached: str(func) is slow)."""
    text = str(func)
    return any(k in text for k in kernels)


@functools.lru_cache(maxsize=64)
def _forbidden_codes(sites: tuple[Site, ...]) -> dict:
    """The code objects of the `code` rules' functions -> the name shown."""
    codes = {}
    for owner, attribute, shown in sites:
        raw = _raw(owner, attribute)
        if raw is not None:
            codes[_function_of(raw).__code__] = shown
    return codes


class _State(threading.local):
    depth = 0
    guard: Guard | None = None  # the outermost guard on this thread
    importing: tuple | None = None  # (rules, kata name, file) while a kata file is imported


_state = _State()
TRIPPED: list[str] = []  # every refusal in this process, in order: what a swallowed one leaves


def trips() -> int:
    """How many refusals this process has seen; `TRIPPED[n:]` are those since `n`."""
    return len(TRIPPED)


class _FunctionNet(TorchFunctionMode):
    def __init__(self, guard: Guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        guard, rules = self.guard, self.guard.rules
        name = getattr(func, "__name__", "") or str(func)
        if name in rules.functions:
            guard.trip(f"F.{name}")
        if rules.kernels and _kernel_hit(rules.kernels, func):
            guard.trip(f"torch.{name}" if getattr(func, "__name__", "") else str(func))
        if guard.codes:
            guard.check_stack(sys._getframe(1))
        result = func(*args, **(kwargs or {}))
        if rules.no_graph:
            guard.check_no_graph(result, name)
        return result


class _DispatchNet(TorchDispatchMode):
    def __init__(self, guard: Guard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if any(k in name for k in self.guard.rules.kernels):
            self.guard.trip(name)
        return func(*args, **(kwargs or {}))


class Guard:
    """Context manager: raises ForbiddenCallError when the code inside makes a forbidden call.

    The call is also remembered, so a kata that catches the error still fails on exit.
    Re-entrant: only the outermost guard on a thread sets the nets up."""

    def __init__(self, rules: Rules, kata_name: str, kata_file: str | None = None):
        self.rules, self.kata_name, self.kata_file = rules, kata_name, kata_file
        self.seen: list[str] = []
        self.nets: list = []
        self.entry = None
        self.codes = _forbidden_codes(rules.code)
        self.python_sites = _python_sites(rules.python)

    def message(self, name: str) -> str:
        action = name if name.startswith("records ") else f"calls {name}"
        return f"{self.kata_name} {action}{self.where()}, which is not allowed: {self.rules.why}"

    def where(self) -> str:
        """' (at kata.py, line 12)': the innermost line of the kata's file on the stack."""
        if not self.kata_file:
            return ""
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.kata_file:
                return f" (at {Path(self.kata_file).name}, line {frame.f_lineno})"
            frame = frame.f_back
        return ""

    def trip(self, name: str):
        self.seen.append(name)
        message = self.message(name)
        TRIPPED.append(message)
        raise ForbiddenCallError(message)

    def check_stack(self, frame) -> None:
        """Trip if forbidden code is running between the kata's entry and this torch call."""
        while frame is not None and frame is not self.entry:
            shown = self.codes.get(frame.f_code)
            if shown:
                self.trip(shown)
            frame = frame.f_back

    def check_no_graph(self, result, name: str) -> None:
        tensors = result if isinstance(result, (tuple, list)) else (result,)
        if any(isinstance(t, torch.Tensor) and t.grad_fn is not None for t in tensors):
            self.trip(f"records an autograd graph ({name} on tensors that require grad)")

    def __enter__(self):
        _state.depth += 1
        if _state.depth > 1:
            return self
        install_checkpoints(self.rules)
        _state.guard = self
        self.entry = sys._getframe(1)
        self.nets = [_FunctionNet(self)] if self.rules.needs_function_mode else []
        self.nets += [_DispatchNet(self)] if self.rules.kernels else []
        for net in self.nets:
            net.__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        _state.depth -= 1
        if _state.depth > 0:
            return False
        for net in reversed(self.nets):
            net.__exit__(None, None, None)
        _state.guard = None
        self.entry = None
        if self.seen and not isinstance(error, ForbiddenCallError):
            raise ForbiddenCallError(self.message(self.seen[0]))
        return False


def check_structure(module: nn.Module, rules: Rules, kata_name: str) -> None:
    for name, child in module.named_modules():
        if rules.modules and isinstance(child, rules.modules):
            where = f"self.{name}" if name else "itself"
            raise ForbiddenCallError(
                f"{kata_name} contains an nn.{type(child).__name__} ({where}), which is not allowed: {rules.why}"
            )


def guarded(symbol, rules: Rules, kata_name: str, kata_file: str | None = None):
    """The kata's public function, nn.Module class or autograd.Function, running under a
    Guard whenever called (a Function: its forward and its backward)."""
    if rules == NONE:
        return symbol

    def under_guard(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            with Guard(rules, kata_name, kata_file):
                return function(*args, **kwargs)

        return call

    if isinstance(symbol, type) and issubclass(symbol, nn.Module):

        class Guarded(symbol):
            def __init__(self, *args, **kwargs):
                with Guard(rules, kata_name, kata_file):
                    super().__init__(*args, **kwargs)
                check_structure(self, rules, kata_name)

            def __call__(self, *args, **kwargs):
                with Guard(rules, kata_name, kata_file):
                    return super().__call__(*args, **kwargs)

        Guarded.__name__, Guarded.__qualname__, Guarded.__module__ = (
            symbol.__name__,
            symbol.__qualname__,
            symbol.__module__,
        )
        return Guarded
    if isinstance(symbol, type) and issubclass(symbol, torch.autograd.Function):
        steps = ["forward", "backward"] + [
            name
            for name in ("setup_context", "vjp", "jvp")
            if _function_of(getattr(symbol, name)) is not _function_of(getattr(torch.autograd.Function, name))
        ]
        overrides = {name: staticmethod(under_guard(getattr(symbol, name))) for name in steps}
        overrides |= {"__module__": symbol.__module__, "__qualname__": symbol.__qualname__}
        return type(symbol.__name__, (symbol,), overrides)
    if callable(symbol):
        return under_guard(symbol)
    return symbol


class GuardedKata:
    """The kata module as tests see it: each public symbol guarded by its rules, everything
    else as is."""

    def __init__(self, module, symbols: dict[str, Rules], kata_name: str):
        self._module = module
        for symbol, rules in symbols.items():
            setattr(self, symbol, guarded(getattr(module, symbol), rules, kata_name, module.__file__))

    def __getattr__(self, name):
        return getattr(self._module, name)


# --------------------------------------------------------------------------- set before the kata's import


_installed: set = set()


def _replace_once(owner, attribute: str, make) -> None:
    """Replace owner.attribute by make(original), once per process."""
    key = (id(owner), attribute)
    raw = _raw(owner, attribute)
    if key in _installed or raw is None:
        return
    replacement = make(_function_of(raw))
    setattr(owner, attribute, staticmethod(replacement) if isinstance(raw, staticmethod) else replacement)
    _installed.add(key)


@functools.lru_cache(maxsize=64)
def _python_sites(sites: tuple[Site, ...]) -> frozenset:
    """(owner, attribute) of the rules' Python entry points, owners imported (cached: a guard
    is made for every guarded call)."""
    return frozenset((_resolve(owner), attribute) for owner, attribute, _ in sites)


@functools.lru_cache(maxsize=64)
def install_checkpoints(rules: Rules) -> None:
    """Each of the rules' Python entry points replaced by a checkpoint that trips while a
    guard naming it is on (on this thread), and otherwise calls through."""
    for owner, attribute, shown in rules.python:
        owner = _resolve(owner)

        def make(original, site=(owner, attribute), shown=shown):
            @functools.wraps(original)
            def checkpoint(*args, **kwargs):
                guard = _state.guard
                if guard is not None and site in guard.python_sites:
                    guard.trip(shown)
                return original(*args, **kwargs)

            return checkpoint

        _replace_once(owner, attribute, make)


@functools.lru_cache(maxsize=4096)
def _trusted(filename: str) -> bool:
    """Whether code from this file may switch the modes off: torch's own, and the judge's."""
    return os.path.realpath(filename).startswith(TRUSTED_FOLDERS)


def install_hatch_tripwires() -> None:
    """The escape hatches replaced by tripwires: called from outside torch and the judge
    while a guard is on, they trip; otherwise they are what they were."""
    for module, attribute in ESCAPE_SITES:
        try:
            owner = importlib.import_module(module)
        except ImportError:
            continue

        def make(original, shown=f"{module}.{attribute}"):
            @functools.wraps(original)
            def tripwire(*args, **kwargs):
                guard = _state.guard
                if guard is not None and not _trusted(sys._getframe(1).f_code.co_filename):
                    guard.trip(f"{shown}, which switches the grader's checks off")
                return original(*args, **kwargs)

            return tripwire

        _replace_once(owner, attribute, make)


def _inherited():
    """What a thread started now must run under: the guard on, else the kata being imported."""
    guard = _state.guard
    return (guard.rules, guard.kata_name, guard.kata_file) if guard is not None else _state.importing


def install_thread_guards() -> None:
    """Threads started under a guard, or while a kata file is imported, run under the same
    rules for their whole life (threading.Thread, executors built on it, _thread)."""
    if "threads" in _installed:
        return
    _installed.add("threads")
    start, bootstrap, start_new_thread = (
        threading.Thread.start,
        threading.Thread._bootstrap_inner,
        _thread.start_new_thread,
    )

    def guarded_start(self):
        self._kata_rules = _inherited()
        return start(self)

    def guarded_bootstrap(self):
        inherited = getattr(self, "_kata_rules", None)
        if inherited is None or inherited[0] == NONE:
            return bootstrap(self)
        with Guard(*inherited):
            return bootstrap(self)

    def guarded_start_new_thread(function, args, kwargs=None):
        inherited = _inherited()
        if inherited is None or inherited[0] == NONE:
            return start_new_thread(function, args, kwargs or {})

        def run(*args, **kwargs):
            with Guard(*inherited):
                return function(*args, **kwargs)

        return start_new_thread(run, args, kwargs or {})

    threading.Thread.start = guarded_start
    threading.Thread._bootstrap_inner = guarded_bootstrap
    _thread.start_new_thread = guarded_start_new_thread


class importing_kata:
    """Context manager around the kata file's import: threads it starts inherit `rules`."""

    def __init__(self, rules: Rules, kata_name: str, kata_file: str):
        self.inherited = (rules, kata_name, kata_file)

    def __enter__(self):
        _state.importing = self.inherited
        return self

    def __exit__(self, *exc):
        _state.importing = None
        return False


def prepare_for_kata(symbols: dict[str, Rules]) -> None:
    """Before a kata file is imported: checkpoints, tripwires and thread guards in place."""
    for rules in symbols.values():
        install_checkpoints(rules)
    if any(rules != NONE for rules in symbols.values()):
        install_hatch_tripwires()
    install_thread_guards()


def union(symbols: dict[str, Rules]) -> Rules:
    """Every rule of every public symbol: what a thread the kata starts at import runs under."""
    return functools.reduce(lambda a, b: a + b, symbols.values(), NONE)

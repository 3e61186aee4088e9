"""Detect, at run time, the calls a kata may not make (the very thing it asks you to write).

Each test module may declare `FORBIDDEN = <Rules>`. While the kata's public function or
module runs (never while the test computes its reference), four nets are out:
- a TorchFunctionMode sees torch-level calls such as F.scaled_dot_product_attention, also
  when reached through an alias, torch._C._nn or torch.ops.aten;
- a TorchDispatchMode sees the aten kernels underneath (their names differ under
  inference mode, so rules match substrings), which DisableTorchFunction does not hide;
- Python-level entry points (autograd's engine, generate_square_subsequent_mask) are
  swapped for tripwires, including aliases bound in the kata's own namespace;
- a structural check refuses forbidden submodules (nn.MultiheadAttention, nn.Transformer*).
Escape hatches that switch the modes off are refused by an AST scan when the file loads.
These nets catch honest shortcuts, not determined adversaries.
"""

import ast
import functools
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode  # private, but the only dispatch-level hook


class ForbiddenCallError(Exception):
    """The kata called something its task forbids. The grader's verdict: forbidden."""


@dataclass(frozen=True)
class Rules:
    functions: tuple[str, ...] = ()  # names of torch functions, as the function mode sees them
    kernels: tuple[str, ...] = ()  # substrings of aten kernel names, as the dispatch mode sees them
    modules: tuple[type, ...] = ()  # submodule types a kata module may not contain
    python: tuple[tuple[object, str, str], ...] = ()  # (owner, attribute, name shown) to trip
    why: str = ""

    def __add__(self, other: "Rules") -> "Rules":
        return Rules(
            self.functions + other.functions,
            self.kernels + other.kernels,
            self.modules + other.modules,
            self.python + other.python,
            other.why or self.why,
        )


NONE = Rules()
ATTENTION = Rules(
    functions=("scaled_dot_product_attention",),
    kernels=("scaled_dot_product", "flash_attention", "efficient_attention", "_fused_sdp", "cudnn_attention"),
    why="this kata asks you to write attention yourself",
)
MODULE_ATTENTION = ATTENTION + Rules(
    functions=("multi_head_attention_forward",),
    kernels=("multi_head_attention", "_transformer_encoder_layer_fwd", "_native_multi_head_attention"),
    modules=(
        nn.MultiheadAttention,
        nn.Transformer,
        nn.TransformerEncoder,
        nn.TransformerDecoder,
        nn.TransformerEncoderLayer,
        nn.TransformerDecoderLayer,
    ),
    why="this kata asks you to write attention yourself",
)
AUTOGRAD = Rules(
    kernels=("_backward", "_make_dual"),  # autograd's kernels (softmax_backward_data & co), forward-mode AD
    python=(
        (torch.autograd, "_engine_run_backward", "autograd (torch.autograd.grad, .backward() or torch.func)"),
        (torch.autograd.graph, "_engine_run_backward", "autograd (torch.autograd.grad, .backward() or torch.func)"),
    ),
    why="this kata asks you to derive the gradients by hand",
)
CAUSAL_MASK = Rules(
    python=(
        (nn.Transformer, "generate_square_subsequent_mask", "nn.Transformer.generate_square_subsequent_mask"),
        (
            torch.nn.modules.transformer,
            "_generate_square_subsequent_mask",
            "nn.Transformer.generate_square_subsequent_mask",
        ),
    ),
    why="this kata asks you to build that mask yourself",
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


def scan_escape_hatches(path: Path) -> list[str]:
    """'line N: name' for each escape-hatch name the file mentions (attribute, import or name)."""
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
        found += [f"line {node.lineno}: {name}" for name in names if name in ESCAPE_HATCHES]
    return found


class _State(threading.local):
    depth = 0


_state = _State()


class _FunctionNet(TorchFunctionMode):
    def __init__(self, guard: "Guard"):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "") or str(func)
        if name in self.guard.rules.functions or any(k in str(func) for k in self.guard.rules.kernels):
            self.guard.trip(f"F.{name}" if name in self.guard.rules.functions else str(func))
        return func(*args, **(kwargs or {}))


class _DispatchNet(TorchDispatchMode):
    def __init__(self, guard: "Guard"):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if any(k in name for k in self.guard.rules.kernels):
            self.guard.trip(name)
        return func(*args, **(kwargs or {}))


class Guard:
    """Context manager that raises ForbiddenCallError if the code inside makes a forbidden call.

    The call is also remembered, so a kata that catches the error still fails on exit.
    Re-entrant: only the outermost guard on a thread sets the nets up.
    """

    def __init__(self, rules: Rules, kata_name: str, namespace: dict | None = None):
        self.rules, self.kata_name, self.namespace = rules, kata_name, namespace or {}
        self.seen: list[str] = []
        self.undo: list = []

    def trip(self, name: str):
        self.seen.append(name)
        raise ForbiddenCallError(f"{self.kata_name} calls {name}, which is not allowed: {self.rules.why}")

    def _tripwire(self, shown: str):
        guard = self

        def tripwire(*args, **kwargs):
            guard.trip(shown)

        return tripwire

    def _patch(self):
        for owner, attribute, shown in self.rules.python:
            raw = vars(owner).get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
            if raw is None:
                continue
            original = raw.__func__ if isinstance(raw, staticmethod) else raw
            wire = self._tripwire(shown)
            setattr(owner, attribute, staticmethod(wire) if isinstance(raw, staticmethod) else wire)
            self.undo.append(functools.partial(setattr, owner, attribute, raw))
            for key, value in list(self.namespace.items()):  # `from torch.autograd import grad as g`-style aliases
                if value is original:
                    self.namespace[key] = wire
                    self.undo.append(functools.partial(self.namespace.__setitem__, key, value))

    def __enter__(self):
        _state.depth += 1
        if _state.depth > 1:
            return self
        self._patch()
        self.nets = [_FunctionNet(self), _DispatchNet(self)] if self.rules.functions or self.rules.kernels else []
        for net in self.nets:
            net.__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        _state.depth -= 1
        if _state.depth > 0:
            return False
        for net in reversed(self.nets):
            net.__exit__(None, None, None)
        for undo in reversed(self.undo):
            undo()
        self.undo.clear()
        if self.seen and not isinstance(error, ForbiddenCallError):
            raise ForbiddenCallError(f"{self.kata_name} calls {self.seen[0]}, which is not allowed: {self.rules.why}")
        return False


def check_structure(module: nn.Module, rules: Rules, kata_name: str) -> None:
    for name, child in module.named_modules():
        if rules.modules and isinstance(child, rules.modules):
            where = f"self.{name}" if name else "itself"
            raise ForbiddenCallError(
                f"{kata_name} contains an nn.{type(child).__name__} ({where}), which is not allowed: {rules.why}"
            )


def guarded(symbol, rules: Rules, kata_name: str, namespace: dict):
    """The kata's public function or nn.Module class, running under a Guard whenever called."""
    if rules == NONE:
        return symbol
    if isinstance(symbol, type) and issubclass(symbol, nn.Module):

        class Guarded(symbol):
            def __init__(self, *args, **kwargs):
                with Guard(rules, kata_name, namespace):
                    super().__init__(*args, **kwargs)
                check_structure(self, rules, kata_name)

            def __call__(self, *args, **kwargs):
                with Guard(rules, kata_name, namespace):
                    return super().__call__(*args, **kwargs)

        Guarded.__name__, Guarded.__qualname__, Guarded.__module__ = (
            symbol.__name__,
            symbol.__qualname__,
            symbol.__module__,
        )
        return Guarded
    if callable(symbol):

        @functools.wraps(symbol)
        def call(*args, **kwargs):
            with Guard(rules, kata_name, namespace):
                return symbol(*args, **kwargs)

        return call
    return symbol


class GuardedKata:
    """The kata module as tests see it: its public symbol guarded, everything else as is."""

    def __init__(self, module, symbol: str, rules: Rules, kata_name: str):
        self._module = module
        setattr(self, symbol, guarded(getattr(module, symbol), rules, kata_name, vars(module)))

    def __getattr__(self, name):
        return getattr(self._module, name)

"""What a kata's tests (and a kata process) import on their first run, imported once by a
warm process so each process forked from it starts warm: the grader's fork servers, and
the judging process before it forks its kata processes. torch.fx.experimental.symbolic_shapes
is what the first operation on a "meta" tensor (or under a dispatch mode) imports: half a
second to two and a half, sympy included. torch.nn.attention.bias (where causal_mask's
forbidden CausalBias lives) imports torch._dynamo (0.8 s here), which every optimizer's first
construction needs too (the training katas): warmed here, once."""

from __future__ import annotations

import compileall
import contextlib
import importlib
import subprocess
import sys
import sysconfig
from pathlib import Path

WARM_MODULES = (
    "numpy",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.testing",
    "torch.overrides",
    "torch.utils.benchmark",
    "torch.utils._python_dispatch",
    "torch.fx.experimental.symbolic_shapes",
    "torch.nn.attention.bias",
    "pytest",
    "judge.plugin",
    "judge.timing",
    "judge.testing.spec",
    "judge.testing.checks",
    "judge.testing.inputs",
    "judge.testing.modules",
    "judge.remote.server",
    "torch.utils.serialization.config",
)


def warm_up() -> None:
    """Import WARM_MODULES, and work out what removing a kata's forbidden calls touches; only a
    speed-up: a process does whatever is still missing when it needs it."""
    for module in WARM_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        from judge.forbidden import prepare

        prepare()


# Packages whose modules grading imports later, one at a time (pytest's plugins at each
# judging process's start, torch.distributed's in the distributed katas): compiled whole.
IMPORTED_LATER = (
    "_pytest",
    "pytest",
    "pluggy",
    "pytest_timeout.py",
    "torch/distributed",
    "torch/profiler",
    "torch/nn",
    "torch/optim",
)
# What warm_up reaches only after torch itself (about 5 s of compiling, on one core): sympy
# (what symbolic_shapes imports; it needs no torch, so a second process imports it, compiling
# it), and torch's dynamo and fx (compiled whole from their files, without importing torch).
# Done on the other core meanwhile, so warm_up finds them compiled.
IMPORTED_WITHOUT_TORCH = ("sympy",)
REACHED_AFTER_TORCH = ("torch/_dynamo", "torch/fx")


def compile_installed() -> None:
    """Set-up's last step (`python -m judge.warm`): pip installs without compiling (28 s -> 11 s
    here: most of torch's and sympy's modules are never imported), then this compiles what
    grading imports: what warm_up imports, compiled by its own import (writing bytecode, which
    this environment may turn off), while a second process (`--helper`) compiles on the other
    core what warm_up reaches last, then IMPORTED_LATER. Both may compile the same file: each
    writes its bytecode whole, under a name of its own, then renames it into place. A grading
    process writes no bytecode (PYTHONDONTWRITEBYTECODE), so a module left out is compiled from
    its source by each process that imports it: slower, never wrong."""
    helper = subprocess.Popen([sys.executable, "-m", "judge.warm", "--helper"])
    sys.dont_write_bytecode = False
    warm_up()
    for source in imported_from_installed():  # what was imported before (up to date: skipped)
        compileall.compile_file(source, quiet=2)
    helper.wait()


def compile_meanwhile() -> None:
    """The helper: IMPORTED_WITHOUT_TORCH by importing them, REACHED_AFTER_TORCH and
    IMPORTED_LATER whole (no torch import: warm_up is compiling torch itself meanwhile)."""
    sys.dont_write_bytecode = False
    for package in IMPORTED_WITHOUT_TORCH:
        with contextlib.suppress(Exception):
            importlib.import_module(package)
    installed = Path(sysconfig.get_paths()["purelib"])
    for package in REACHED_AFTER_TORCH + IMPORTED_LATER:
        path = installed / package
        if path.is_dir():
            compileall.compile_dir(path, quiet=2)
        elif path.exists():
            compileall.compile_file(path, quiet=2)


def imported_from_installed() -> list[Path]:
    """The source files of the modules this process has imported from the installed packages."""
    installed = Path(sysconfig.get_paths()["purelib"])
    sources = (Path(getattr(module, "__file__", None) or "/") for module in list(sys.modules.values()))
    return [source for source in sources if source.suffix == ".py" and installed in source.parents]


if __name__ == "__main__":
    compile_meanwhile() if sys.argv[1:] == ["--helper"] else compile_installed()

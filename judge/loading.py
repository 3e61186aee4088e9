"""Loading the learner's kata file in the kata process, and torch's global state around it."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import torch

from judge.forbidden import Rules, refuse_escape_hatches, remove, union
from judge.language import tr


class KataLoadError(Exception):
    """The file under test could not be imported or lacks the kata's public symbol."""


class TorchStateChanged(Exception):
    """The kata changed torch's global settings and left them so (they are put back first)."""


def load_kata(path: Path, *symbols: str):
    """Import the kata file at `path` as a fresh module and return it.

    Raises KataLoadError with a one-line reason when the file is missing, fails to import
    (syntax error, exception at import time) or does not define one of `symbols`."""
    if not path.is_file():
        raise KataLoadError(tr("no file {path}", path=path))
    module_name = f"kata_under_test_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise KataLoadError(f"{path}, line {error.lineno}: SyntaxError: {error.msg}") from None
    except BaseException as error:  # noqa: BLE001 - a kata may raise anything at import
        if isinstance(error, KeyboardInterrupt):
            raise
        raise KataLoadError(
            tr("importing {path} raised {name}: {error}", path=path, name=type(error).__name__, error=error)
        ) from error
    for symbol in symbols:
        if not hasattr(module, symbol):
            raise KataLoadError(tr("{path} defines no `{symbol}`", path=path, symbol=symbol))
    return module


def load_denied(
    path: Path, symbols: dict[str, Rules], kata_name: str, private_dir: str | None = None, *, namespaces: bool = True
):
    """The kata module, imported in a process from which what its symbols' rules forbid has
    been removed for good (judge.forbidden), after a static scan for escape hatches, inside
    the sandbox's walls when `private_dir` (its only writable place) is given; torch's global
    state checked against what it was just before the import."""
    refuse_escape_hatches(path)
    rules = union(symbols)
    remove(rules, kata=kata_name, kata_file=str(path))
    if private_dir is not None and os.environ.get("KATAS_SANDBOX") != "off":  # off: tests of the other walls
        from judge.sandbox import enclose

        os.environ["TMPDIR"] = tempfile.tempdir = private_dir
        enclose(private_dir, threads=rules.threads and not rules.autograd, namespaces=namespaces)
    baseline = torch_state()
    module = load_kata(path, *symbols)
    restore_torch_state(baseline, when=tr("importing {file}", file=path.name))
    return module, baseline


def torch_state() -> dict:
    return {
        "default dtype": torch.get_default_dtype(),
        "default device": torch.get_default_device(),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "number of threads": torch.get_num_threads(),
    }


def restore_torch_state(baseline: dict, *, when: str) -> None:
    """Raise TorchStateChanged if torch's global settings differ from `baseline`, after
    putting them back, so one kata (or one test) cannot poison the next."""
    now = torch_state()
    changed = [name for name in baseline if now[name] != baseline[name]]
    if not changed:
        return
    torch.set_default_dtype(baseline["default dtype"])
    torch.set_default_device(baseline["default device"])
    torch.set_grad_enabled(baseline["grad mode"])
    torch.use_deterministic_algorithms(baseline["deterministic algorithms"])
    torch.set_num_threads(baseline["number of threads"])
    name = changed[0]
    raise TorchStateChanged(
        tr(
            "{when} changed torch's {name} from {before} to {after} and left it so; "
            "restore global settings (e.g. with a context manager) or avoid them",
            when=when,
            name=name,
            before=baseline[name],
            after=now[name],
        )
    )

"""What a kata's tests (and a kata process) import on their first run, imported once by a
warm process so each process forked from it starts warm: the grader's fork servers, and
the judging process before it forks its kata processes. torch.fx.experimental.symbolic_shapes
is what the first operation on a "meta" tensor (or under a dispatch mode) imports: half a
second to two and a half, sympy included. torch.nn.attention.bias (where causal_mask's
forbidden CausalBias lives) imports torch._dynamo (0.8 s here), which every optimizer's first
construction needs too (the training katas): warmed here, once."""

from __future__ import annotations

import contextlib
import importlib

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

"""`make diff`: the learner's file against the reference solution, then whether it passes."""

from __future__ import annotations

import argparse
import difflib
import random
import sys
import time
from typing import TextIO

from judge.catalog import load_catalog
from judge.engines import ProcessEngine
from judge.errors import UsageError
from judge.history import history_of
from judge.language import tr
from judge.places import Places, fingerprint, shown
from judge.practice.common import colour_enabled, find_kata, verdict_block
from judge.stubs import reference_text, solution_text


def unified_diff(learner: str, solution: str, learner_label: str, solution_label: str) -> list[str]:
    return list(
        difflib.unified_diff(
            learner.splitlines(keepends=True), solution.splitlines(keepends=True), learner_label, solution_label
        )
    )


def paint_diff(lines: list[str], colour: bool) -> str:
    def one(line: str) -> str:
        if not colour:
            return line
        code = (
            "1"
            if line.startswith(("---", "+++"))
            else "36"
            if line.startswith("@@")
            else ("32" if line.startswith("+") else "31" if line.startswith("-") else "")
        )
        return f"\033[{code}m{line.rstrip(chr(10))}\033[0m\n" if code else line

    return "".join(one(line if line.endswith("\n") else line + "\n") for line in lines)


def diff_command(
    args: argparse.Namespace, places: Places, out: TextIO | None = None, engine: ProcessEngine | None = None
) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    kata = find_kata(catalog, args.kata, example="make diff KATA=causal_mask")
    target = places.kata_file(kata.name)
    if not target.exists():
        raise UsageError(
            tr("{path} does not exist; make reset KATA={name} writes the stub", path=shown(target), name=kata.name)
        )
    learner = target.read_text(encoding="utf-8", errors="replace")
    solution = reference_text(solution_text(kata.name))
    lines = unified_diff(
        learner,
        solution,
        tr("{path} (yours)", path=shown(target)),
        tr("{path} (reference)", path=f"solutions/{kata.name}.py"),
    )
    if lines:
        out.write(paint_diff(lines, colour_enabled(out)))
    else:
        print(tr("No difference: {path} is the reference solution.", path=shown(target)), file=out)
    out.flush()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    engine = engine or ProcessEngine(device=args.device)
    print("\n" + tr("Grading your {name} (seed {seed})...", name=kata.name, seed=seed), file=out, flush=True)
    result = engine.grade(kata.name, target, seed)
    history_of(places).append_grade(
        result, source="diff", seed=seed, sha=fingerprint(target.read_bytes()), now=time.time()
    )
    for line in verdict_block(result, label=kata.name, seed=seed, colour=colour_enabled(out), latency=None):
        print(line, file=out)
    if result.status == "pass":
        print(tr("{name} passes.", name=kata.name), file=out)
    else:
        print(tr("{name} does not pass yet.", name=kata.name), file=out)
    return 0 if result.status == "pass" else 1


# --------------------------------------------------------------------------- mock interviews

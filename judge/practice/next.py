"""`make next`: the next kata of your path, or the review that is due (judge.learning)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from judge.catalog import load_catalog
from judge.history import history_of
from judge.language import tr
from judge.learning import load_paths, next_step, standings
from judge.places import Places
from judge.practice.common import when


def next_command(
    args: argparse.Namespace, places: Places, out: TextIO | None = None, now: Callable[[], float] = time.time
) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    by_name = {kata.name: kata for kata in catalog}
    found = standings(history_of(places).read(), list(by_name))
    step = next_step(load_paths(catalog), found, now())
    if step.kind == "review":
        text = tr(
            "Next: a review of {kata} (due since {due}): redo it from a bare stub, against the clock: "
            "make interview KATA={kata}",
            kata=step.kata,
            due=when(step.due),
        )
    elif step.kind == "kata":
        text = tr(
            "Next in {path}: {kata} ({title}): fill in katas/{kata}.py, with make watch KATA={kata} running",
            path=step.path.shown_title,
            kata=step.kata,
            title=by_name[step.kata].shown_title,
        )
    elif step.due is not None:
        text = tr("Every kata passes. The next review falls due on {due} (make next then).", due=when(step.due))
    else:
        text = tr("Every kata passes and every review is done.")
    print(text, file=out)
    return 0

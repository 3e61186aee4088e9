"""`make hint`: one more hint each time, counted (for the mock interview when one runs)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from judge.catalog import load_catalog
from judge.history import history_of
from judge.language import tr
from judge.places import Places, read_json, write_atomically
from judge.practice.common import find_kata
from judge.practice.mock import active_mock


def hint_command(args: argparse.Namespace, places: Places, out: TextIO | None = None, now: float | None = None) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    kata = find_kata(catalog, args.kata, example="make hint KATA=causal_mask")
    now = time.time() if now is None else now
    mock = active_mock(places, now)
    counter = mock.hints_file if mock and kata.name in mock.katas else places.hints
    hints = kata.shown_hints
    if not hints:
        print(
            tr(
                "{name} has no hints yet (they live in info.toml). make diff KATA={name} shows the reference solution.",
                name=kata.name,
            ),
            file=out,
        )
        return 0
    used = read_json(counter, {})
    before = min(int(used.get(kata.name, 0)), len(hints))
    where = tr(" (counted for the mock interview)") if counter != places.hints else ""
    if before >= len(hints):
        print(
            tr(
                "No hints left for {name}: all {count} are below{where}. Next step: "
                "make diff KATA={name} compares your file with the reference.",
                name=kata.name,
                count=len(hints),
                where=where,
            ),
            file=out,
        )
        for number, text in enumerate(hints, 1):
            print(f"  {number}. {text}", file=out)
        return 0
    count = before + 1
    used[kata.name] = count
    write_atomically(counter, json.dumps(used, indent=2, sort_keys=True) + "\n")
    history_of(places).append(
        {
            "ts": now,
            "event": "hint",
            "kata": kata.name,
            "number": count,
            "of": len(hints),
            **({"mock": mock.id} if where else {}),
        }
    )
    print(
        tr(
            "Hint {count} of {total} for {name} ({title}){where}:",
            count=count,
            total=len(hints),
            name=kata.name,
            title=kata.shown_title,
            where=where,
        ),
        file=out,
    )
    for number, text in enumerate(hints[:count], 1):
        print(f"  {number}. {text}", file=out)
    left = len(hints) - count
    if left:
        print(tr("({left} more: make hint KATA={name})", left=left, name=kata.name), file=out)
    else:
        print(tr("(that was the last hint)"), file=out)
    return 0

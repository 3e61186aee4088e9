"""`make hint`: one more hint each time, counted (for the mock interview when one runs)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from judge.catalog import load_catalog
from judge.history import history_of
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
    if not kata.hints:
        print(
            f"{kata.name} has no hints yet (they live in info.toml). make diff KATA={kata.name} shows the "
            "reference solution.",
            file=out,
        )
        return 0
    used = read_json(counter, {})
    before = min(int(used.get(kata.name, 0)), len(kata.hints))
    where = " (counted for the mock interview)" if counter != places.hints else ""
    if before >= len(kata.hints):
        print(
            f"No hints left for {kata.name}: all {len(kata.hints)} are below{where}. Next step: "
            f"make diff KATA={kata.name} compares your file with the reference.",
            file=out,
        )
        for number, text in enumerate(kata.hints, 1):
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
            "of": len(kata.hints),
            **({"mock": mock.id} if where else {}),
        }
    )
    print(f"Hint {count} of {len(kata.hints)} for {kata.name} ({kata.title}){where}:", file=out)
    for number, text in enumerate(kata.hints[:count], 1):
        print(f"  {number}. {text}", file=out)
    left = len(kata.hints) - count
    print(f"({left} more: make hint KATA={kata.name})" if left else "(that was the last hint)", file=out)
    return 0

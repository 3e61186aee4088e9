"""`make reset`: keep the learner's attempt, then put the stub back as shipped."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from judge.catalog import load_catalog
from judge.history import history_of
from judge.language import tr
from judge.places import Places, shown, write_atomically
from judge.practice.common import find_kata, fresh_path, stamp
from judge.stubs import stub_text


def reset_command(args: argparse.Namespace, places: Places, out: TextIO | None = None, now: float | None = None) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    kata = find_kata(catalog, args.kata, example="make reset KATA=causal_mask")
    now = time.time() if now is None else now
    target, stub = places.kata_file(kata.name), stub_text(kata.name)
    current = target.read_text(encoding="utf-8") if target.exists() else None
    if current == stub:
        print(tr("{path} is already the stub as shipped; nothing to keep.", path=shown(target)), file=out)
        return 0
    kept = None
    if current is not None:
        folder = places.attempts / kata.name
        folder.mkdir(parents=True, exist_ok=True)
        kept = fresh_path(folder, stamp(now), ".py")
        kept.write_bytes(target.read_bytes())  # first the copy: nothing is lost if the next step fails
        with open(kept, "rb") as file:
            os.fsync(file.fileno())
        print(tr("Kept your attempt: {path}", path=shown(kept)), file=out)
    write_atomically(target, stub)
    history_of(places).append({"ts": now, "event": "reset", "kata": kata.name, "kept": str(kept) if kept else None})
    print(tr("Restored {path} to the stub as shipped.", path=shown(target)), file=out)
    return 0

"""`make watch`: re-grade each kata file whose content changed, within a second of the save."""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from judge.catalog import Kata, load_catalog
from judge.engines import ProcessEngine, default_shards, make_engine
from judge.errors import UsageError
from judge.history import History, history_of
from judge.language import tr
from judge.learning import load_paths, next_kata, standings
from judge.places import Places, fingerprint, shown
from judge.practice.common import colour_enabled, find_kata, verdict_block
from judge.protocol import KataResult
from judge.reporting import katas_counted
from judge.timing import format_timing

POLL_SECONDS = 0.1  # a save waits 0.05 s on average to be seen; a poll (stat, read, hash) costs well under 1 ms a kata
SETTLE_SECONDS = 0.03  # a file still changing this long after a change is graded at the next poll


@dataclass
class Seen:
    mtime_ns: int
    size: int
    sha: str


def look(path: Path) -> Seen | None:
    try:
        stat = path.stat()
        return Seen(stat.st_mtime_ns, stat.st_size, fingerprint(path.read_bytes()))
    except OSError:
        return None


class Watcher:
    """Re-grades the kata files whose content changed since they were last seen.

    poll() is one polling iteration (tests drive it directly); run() loops over it.
    """

    def __init__(
        self,
        engine: ProcessEngine,
        folder: Path,
        names: list[str],
        *,
        seed: int,
        history: History,
        out: TextIO | None = None,
        now: Callable[[], float] = time.time,
        source: str = "watch",
        timing: bool = True,
        extra: dict | None = None,
    ):
        self.engine, self.folder, self.names = engine, folder, list(names)
        self.seed, self.history, self.out, self.now = seed, history, out or sys.stdout, now
        self.source, self.timing, self.extra = source, timing, extra or {}
        self.seen: dict[str, Seen | None] = {name: look(self.path(name)) for name in self.names}
        self.colour = colour_enabled(self.out)
        self.before_output: Callable[[], None] = lambda: None  # mock: clears its countdown line
        self.on_verdict: Callable[[KataResult], None] = lambda result: None  # mock: notes first passes
        # what a verdict counts, and the lines shown after it (mock and interview: the math only, then the conventions)
        self.view: Callable[[KataResult], tuple[KataResult, list[str]]] = lambda result: (result, [])
        self.latencies: list[float] = []
        self.fallback_said = False

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.py"

    def changed(self) -> list[str]:
        """Katas whose content differs from what was last seen (and has settled)."""
        names = []
        for name in self.names:
            now = look(self.path(name))
            before = self.seen.get(name)
            if now is None:
                if before is not None:
                    self.seen[name] = None
                    self.say(
                        tr(
                            "{path} was removed (make reset KATA={name} brings the stub back)",
                            path=shown(self.path(name)),
                            name=name,
                        )
                    )
                continue
            if before is not None and now.sha == before.sha:
                self.seen[name] = now  # touched, or saved unchanged: nothing to grade
                continue
            time.sleep(SETTLE_SECONDS)
            if look(self.path(name)) != now:  # still being written: next poll
                continue
            names.append(name)
        return names

    def poll(self) -> list[KataResult]:
        return [self.grade(name, after_save=True) for name in self.changed()]

    def grade(self, name: str, *, after_save: bool = False) -> KataResult:
        path = self.path(name)
        seen = look(path)
        self.seen[name] = seen
        result, notes = self.view(self.engine.grade(name, path, self.seed))
        fallback = getattr(self.engine, "fallback_reason", "")
        if fallback and not self.fallback_said:
            self.fallback_said = True
            self.say(tr("note: {reason}", reason=fallback))
        latency = None
        if after_save and seen is not None and self.now is time.time:  # seconds from the save to the verdict
            latency = max(0.0, time.time() - seen.mtime_ns / 1e9)
            self.latencies.append(latency)
        stamp_text = datetime.fromtimestamp(self.now()).strftime("%H:%M:%S")
        self.say(
            *verdict_block(result, label=f"[{stamp_text}] {name}", seed=self.seed, colour=self.colour, latency=latency),
            *[f"    {line}" for line in notes],
        )
        self.history.append_grade(
            result, source=self.source, seed=self.seed, sha=seen.sha if seen else None, now=self.now(), **self.extra
        )
        self.on_verdict(result)  # before timing: the verdict is what counts
        if result.status == "pass" and self.timing:
            self.engine.time(result, path)
            timing = format_timing(result.timing) or tr("not measured")
            self.say("    " + tr("time vs PyTorch: {timing}", timing=timing))
        stand_by = getattr(self.engine, "stand_by", None)
        if stand_by is not None:  # the next save of this file is graded by processes already started
            stand_by(name, path, self.seed)
        return result

    def say(self, *lines: str) -> None:
        self.before_output()
        print("\n".join(lines), file=self.out, flush=True)

    def run(self, *, interval: float = POLL_SECONDS, sleep: Callable[[float], None] = time.sleep) -> None:
        while True:
            self.poll()
            sleep(interval)


def next_on_path(catalog: list[Kata], places: Places) -> str | None:
    """The next kata of the learner's path not yet passed (judge.learning), None when all are."""
    taking = next_kata(load_paths(catalog), standings(history_of(places).read(), [kata.name for kata in catalog]))
    return None if taking is None else taking[1]


def move_on(watcher: Watcher, catalog: list[Kata], places: Places) -> None:
    """make watch NEXT=1: after a pass, watch the next kata of the path (its verdict at once)."""
    name = next_on_path(catalog, places)
    if name is None:
        watcher.say(tr("Every kata of your paths passes: make next says when a review is due."))
        return
    watcher.names = [name]
    watcher.say(tr("Next: {kata}: {path}", kata=name, path=shown(watcher.path(name))))
    if watcher.path(name).exists():
        watcher.grade(name)


def watch_command(args: argparse.Namespace, places: Places) -> int:
    catalog = load_catalog()
    if args.next and not args.kata:
        args.kata = next_on_path(catalog, places) or catalog[0].name
    names = [find_kata(catalog, args.kata, example="").name] if args.kata else [k.name for k in catalog]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    if not places.katas.is_dir():
        raise UsageError(tr("{folder}: no such folder of katas", folder=places.katas))
    engine = make_engine(args.engine, device=args.device, shards=default_shards())  # one kata at a time: every core
    what = names[0] if args.kata else katas_counted(len(names))
    print(tr("Loading torch and pytest once ({engine} engine)...", engine=engine.kind), flush=True)
    started = time.perf_counter()
    engine.prepare()
    watcher = Watcher(engine, places.katas, names, seed=seed, history=history_of(places), timing=not args.no_timing)
    try:
        print(
            tr(
                "Watching {what} in {folder}/ (seed {seed}; ready in {seconds:.1f} s). "
                "Save a file to grade it; make hint KATA=name when stuck; Ctrl-C stops.",
                what=what,
                folder=shown(places.katas),
                seed=seed,
                seconds=time.perf_counter() - started,
            ),
            flush=True,
        )
        if args.kata and watcher.path(names[0]).exists():
            watcher.grade(names[0])
        while True:
            for result in watcher.poll():
                if args.next and result.status == "pass" and result.name == watcher.names[0]:
                    move_on(watcher, catalog, places)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()  # the grade standing by for the next save
    if watcher.latencies:
        typical = sorted(watcher.latencies)[len(watcher.latencies) // 2]
        print(
            "\n"
            + tr(
                "Stopped watching: {count} grades, median {seconds:.1f} s from save to verdict. Bye!",
                count=len(watcher.latencies),
                seconds=typical,
            )
        )
    else:
        print("\n" + tr("Stopped watching. Bye!"))
    return 0


# --------------------------------------------------------------------------- hints (and mock plans: hints
# asked for during a mock interview count for the mock)

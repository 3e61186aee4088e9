"""`make mock` and `make interview`: a timed interview in a fresh workspace, with its report.

Both give bare stubs (judge.bare: the signatures and a few lines of task) and grade the math
only (judge.interview), listing after each verdict the conventions a production version would
add. `make mock` picks its katas; `make interview KATA=name` is one kata of your choice."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from judge.bare import bare_stub
from judge.catalog import Kata, load_catalog
from judge.engines import ProcessEngine, default_shards, make_engine
from judge.errors import UsageError
from judge.history import history_of
from judge.interview import conventions_note, core_only
from judge.language import tr
from judge.places import Places, read_json, shown, write_atomically
from judge.practice.common import clock, find_kata, fresh_path, stamp
from judge.practice.watch import POLL_SECONDS, Watcher
from judge.protocol import KataResult
from judge.reporting import katas_counted, padded, status_word
from judge.stubs import stub_text


@dataclass
class MockPlan:
    """A mock interview: its folder, its katas and its clock. Saved as mock.json."""

    id: str
    folder: Path
    seed: int
    katas: list[str]
    minutes: float
    started: float
    state: str = "running"  # running, then ended
    pid: int = 0
    mode: str = "mock"  # or "interview": one kata the learner chose

    @property
    def deadline(self) -> float:
        return self.started + self.minutes * 60

    def save(self) -> None:
        data = {k: getattr(self, k) for k in ("id", "seed", "katas", "minutes", "started", "state", "pid", "mode")}
        write_atomically(self.folder / "mock.json", json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path) -> MockPlan | None:
        data = read_json(folder / "mock.json", None)
        try:
            return cls(folder=folder, **data)
        except TypeError:
            return None

    @property
    def hints_file(self) -> Path:
        return self.folder / "hints.json"


def process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def active_mock(places: Places, now: float) -> MockPlan | None:
    """The mock interview (or interview) running now, if any: its hints count for it."""
    for where in (places.mocks, places.interviews):
        if not where.is_dir():
            continue
        for folder in sorted(where.iterdir(), reverse=True):
            plan = MockPlan.load(folder)
            if plan and plan.state == "running" and now < plan.deadline and process_alive(plan.pid):
                return plan
    return None


def interview_stub(kata: Kata) -> str:
    """The bare stub an interview hands out (the full stub where info.toml has no task for it)."""
    stub = stub_text(kata.name)
    if not kata.interview:
        return stub
    return bare_stub(stub, kata.shown_interview, title=tr("Interview: {title}", title=kata.shown_title))


def write_workspace(where: Path, katas: list[Kata], now: float) -> Path:
    """A fresh folder under `where` with a bare stub for each kata."""
    where.mkdir(parents=True, exist_ok=True)
    folder = fresh_path(where, stamp(now))
    folder.mkdir()
    for kata in katas:
        (folder / f"{kata.name}.py").write_text(interview_stub(kata), encoding="utf-8")
    return folder


def pick_katas(catalog: list[Kata], n: int, seed: int) -> list[Kata]:
    """n katas, mixing difficulties: the tiers (katas of one difficulty) in a seeded order,
    one kata from each in turn, so n katas span min(n, tiers) difficulties. Easiest first."""
    if not 1 <= n <= len(catalog):
        raise UsageError(tr("N={n}: pick from 1 to {count} katas", n=n, count=len(catalog)))
    rng = random.Random(seed)
    tiers: dict[int, list[Kata]] = {}
    for kata in catalog:
        tiers.setdefault(kata.difficulty, []).append(kata)
    for members in tiers.values():
        rng.shuffle(members)
    order = sorted(tiers)
    rng.shuffle(order)
    picked: list[Kata] = []
    while len(picked) < n:
        for difficulty in order:
            if tiers[difficulty] and len(picked) < n:
                picked.append(tiers[difficulty].pop())
    position = {k.name: i for i, k in enumerate(catalog)}
    return sorted(picked, key=lambda k: (k.difficulty, position[k.name]))


def start_mock(
    places: Places, catalog: list[Kata], *, n: int, minutes: float | None, seed: int, now: float
) -> MockPlan:
    """A new workspace .katas/mock/<timestamp>/ with fresh stubs and its plan."""
    picked = pick_katas(catalog, n, seed)
    folder = write_workspace(places.mocks, picked, now)
    total = minutes if minutes is not None else float(sum(k.minutes for k in picked))
    plan = MockPlan(folder.name, folder, seed, [k.name for k in picked], total, now, pid=os.getpid())
    plan.save()
    return plan


def start_interview(places: Places, kata: Kata, *, minutes: float | None, seed: int, now: float) -> MockPlan:
    """A new workspace .katas/interview/<timestamp>/ with the kata's bare stub, and its plan."""
    folder = write_workspace(places.interviews, [kata], now)
    total = minutes if minutes is not None else float(kata.minutes)
    plan = MockPlan(folder.name, folder, seed, [kata.name], total, now, pid=os.getpid(), mode="interview")
    plan.save()
    return plan


def task_list(plan: MockPlan, catalog: list[Kata]) -> str:
    by_name = {k.name: k for k in catalog}
    width = max(len(name) for name in plan.katas)
    if plan.mode == "interview":
        head = tr("Interview {id}: {kata} in {time}", id=plan.id, kata=plan.katas[0], time=clock(plan.minutes * 60))
    else:
        head = tr(
            "Mock interview {id}: {katas} in {time} (seed {seed})",
            id=plan.id,
            katas=katas_counted(len(plan.katas)),
            time=clock(plan.minutes * 60),
            seed=plan.seed,
        )
    lines = [
        head,
        tr("Workspace: {folder}/   (your katas/ are not touched)", folder=shown(plan.folder)),
        "",
    ]
    for number, name in enumerate(plan.katas, 1):
        kata = by_name[name]
        lines.append(
            "  "
            + tr(
                "{number}. {name}  {stars}  {minutes:>3} min  {title}",
                number=number,
                name=f"{name:<{width}}",
                stars=kata.stars,
                minutes=kata.minutes,
                title=kata.shown_title,
            )
        )
        lines.append(f"     {shown(plan.folder / (name + '.py'))}")
    lines += [
        "",
        tr("A bare stub, as an interview gives it: the math is graded, the conventions are listed after it."),
        tr("Edit the files above; each save is graded. Stuck? make hint KATA=name (counted in the report)."),
        tr("It ends when every kata passes, when time is up, or at Ctrl-C."),
    ]
    return "\n".join(lines)


class MockSession:
    """Runs a mock interview: re-grades its workspace on save, keeps the clock, reports.

    `now` and `sleep` are injectable, so a test runs a 45-minute interview in no time."""

    def __init__(
        self,
        plan: MockPlan,
        catalog: list[Kata],
        engine: ProcessEngine,
        places: Places,
        *,
        out: TextIO | None = None,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        timing: bool = True,
        interval: float = POLL_SECONDS,
    ):
        self.plan, self.places, self.out, self.now, self.sleep = plan, places, out or sys.stdout, now, sleep
        self.interval = interval
        self.by_name = {k.name: k for k in catalog}
        self.best: dict[str, float] = {name: 0.0 for name in plan.katas}
        self.status: dict[str, str] = {name: "todo" for name in plan.katas}
        self.first_pass: dict[str, float] = {}
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.countdown_shown = ""
        self.last_minute_said: int | None = None
        self.watcher = Watcher(
            engine,
            plan.folder,
            plan.katas,
            seed=plan.seed,
            history=history_of(places),
            out=out,
            now=now,
            source="mock",
            timing=timing,
            extra={"mock": plan.id},
        )
        self.watcher.before_output = self.clear_countdown
        self.watcher.on_verdict = self.note
        self.watcher.view = lambda result: (core_only(result), conventions_note(result))

    def remaining(self) -> float:
        return self.plan.deadline - self.now()

    def all_pass(self) -> bool:
        return len(self.first_pass) == len(self.plan.katas)

    def clear_countdown(self) -> None:
        if self.countdown_shown:
            self.out.write("\r\033[K")
            self.countdown_shown = ""

    def countdown(self) -> None:
        left = max(0.0, self.remaining())
        passing = sum(status == "pass" for status in self.status.values())
        text = "  " + tr(
            "{time} left   {passing} of {total} pass", time=clock(left), passing=passing, total=len(self.plan.katas)
        )
        if self.tty:
            if text != self.countdown_shown:
                self.out.write("\r\033[K" + text)
                self.out.flush()
                self.countdown_shown = text
        else:  # a log, not a terminal: a line a minute
            minute = int(left // 60)
            if minute != self.last_minute_said:
                self.last_minute_said = minute
                print(text.strip(), file=self.out, flush=True)

    def note(self, result: KataResult) -> None:
        self.status[result.name] = result.status
        self.best[result.name] = max(self.best[result.name], result.score)
        if result.status == "pass" and result.name not in self.first_pass:
            self.first_pass[result.name] = self.now() - self.plan.started

    def step(self) -> None:
        """One polling iteration: grade what changed (noting first passes), update the clock."""
        self.watcher.poll()
        self.countdown()

    def run(self) -> dict:
        reason = "stopped"
        try:
            while True:
                self.step()
                if self.all_pass():
                    reason = "all pass"
                    break
                if self.remaining() <= 0:
                    reason = "time is up"
                    break
                self.sleep(min(self.interval, self.remaining()))
        except KeyboardInterrupt:
            reason = "stopped"
        self.clear_countdown()
        return self.finish(reason)

    def finish(self, reason: str) -> dict:
        ended = self.now()
        elapsed = (
            min(ended, self.plan.deadline) - self.plan.started if reason == "time is up" else ended - self.plan.started
        )
        hints = {k: int(v) for k, v in read_json(self.plan.hints_file, {}).items()}
        # solve time: from the previous first pass (or the start) to this one, in the order they passed
        solve, previous = {}, 0.0
        for name, at in sorted(self.first_pass.items(), key=lambda item: item[1]):
            solve[name], previous = at - previous, at
        katas = []
        for name in self.plan.katas:
            kata = self.by_name[name]
            took = solve.get(name)
            katas.append(
                {
                    "kata": name,
                    "difficulty": kata.difficulty,
                    "suggested_minutes": kata.minutes,
                    "status": self.status[name],
                    "best_score": round(self.best[name], 4),
                    "first_pass_s": None if name not in self.first_pass else round(self.first_pass[name], 1),
                    "solve_s": None if took is None else round(took, 1),
                    "vs_suggested": None if took is None else round(took / (kata.minutes * 60), 2),
                    "hints": hints.get(name, 0),
                }
            )
        report = {
            "ts": ended,
            "event": "mock",
            "mode": self.plan.mode,
            "mock": self.plan.id,
            "seed": self.plan.seed,
            "minutes": self.plan.minutes,
            "started": self.plan.started,
            "elapsed_s": round(elapsed, 1),
            "reason": reason,
            "passed": sum(k["status"] == "pass" for k in katas),
            "score": round(100 * sum(k["best_score"] for k in katas) / len(katas), 1),
            "katas": katas,
        }
        text = report_text(report)
        write_atomically(self.plan.folder / "report.json", json.dumps(report, indent=2) + "\n")
        write_atomically(self.plan.folder / "report.txt", text + "\n")
        self.plan.state = "ended"
        self.plan.save()
        history_of(self.places).append(dict(report))
        print("\n" + text, file=self.out, flush=True)
        return report


def report_text(report: dict) -> str:
    reasons = {"all pass": tr("every kata passes"), "time is up": tr("time is up"), "stopped": tr("you stopped")}
    width = max([len(k["kata"]) for k in report["katas"]] + [4])
    facts = {
        "id": report["mock"],
        "reason": reasons.get(report["reason"], report["reason"]),
        "elapsed": clock(report["elapsed_s"]),
        "allowed": clock(report["minutes"] * 60),
        "seed": report["seed"],
    }
    if report.get("mode") == "interview":
        head = tr("Interview {id} report: {reason} after {elapsed} of {allowed} (seed {seed})", **facts)
    else:
        head = tr("Mock interview {id} report: {reason} after {elapsed} of {allowed} (seed {seed})", **facts)
    lines = [
        head,
        "",
        (
            f"{padded(tr('kata'), width)}  {padded(tr('result'), 7)} {padded(tr('score'), 5, right=True)}  "
            f"{padded(tr('passed at'), 9, right=True)}  {padded(tr('took'), 6, right=True)}  "
            f"{padded(tr('suggested'), 9, right=True)}  {padded(tr('vs'), 5, right=True)}  {tr('hints')}"
        ),
    ]
    for k in report["katas"]:
        ratio = "-" if k["vs_suggested"] is None else f"{k['vs_suggested']:.2f}x"
        lines.append(
            f"{k['kata']:<{width}}  {padded(status_word(k['status']), 7)} {k['best_score']:>5.0%}  {clock(k['first_pass_s']):>9}  "
            f"{clock(k['solve_s']):>6}  {k['suggested_minutes']:>5} min  {ratio:>5}  {k['hints']}"
        )
    lines += [
        "",
        tr(
            "{passed} of {total} pass; score {score:.0f} / 100 (the best score of each kata during the interview).",
            passed=report["passed"],
            total=len(report["katas"]),
            score=report["score"],
        ),
        tr("took: from the previous first pass (or the start) to this kata's; vs: took / suggested minutes."),
    ]
    return "\n".join(lines)


def mock_command(args: argparse.Namespace, places: Places) -> int:
    catalog = load_catalog()
    if args.n > len(catalog):
        raise UsageError(tr("N={n}: there are only {count} katas", n=args.n, count=len(catalog)))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    started = time.perf_counter()
    plan = start_mock(places, catalog, n=args.n, minutes=args.minutes, seed=seed, now=time.time())
    return run_session(plan, catalog, places, args, started)


def interview_command(args: argparse.Namespace, places: Places) -> int:
    catalog = load_catalog()
    kata = find_kata(catalog, args.kata, example="make interview KATA=multi_head_attention")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    started = time.perf_counter()
    plan = start_interview(places, kata, minutes=args.minutes, seed=seed, now=time.time())
    return run_session(plan, catalog, places, args, started)


def run_session(plan: MockPlan, catalog: list[Kata], places: Places, args: argparse.Namespace, started: float) -> int:
    """Show the tasks, start the clock, load the judge meanwhile, and run to the report."""
    print(task_list(plan, catalog), flush=True)
    print(
        tr(
            "The clock runs from now (tasks ready in {seconds:.2f} s); the judge loads torch meanwhile.",
            seconds=time.perf_counter() - started,
        ),
        flush=True,
    )
    engine = make_engine(args.engine, device=args.device, shards=default_shards())  # one kata at a time: every core
    try:
        engine.prepare()  # torch, while the learner reads the tasks
        session = MockSession(plan, catalog, engine, places, timing=not args.no_timing, interval=args.interval)
        print(tr("Judge ready {seconds:.1f} s after the start.", seconds=time.perf_counter() - started), flush=True)
    except KeyboardInterrupt:
        MockSession(plan, catalog, ProcessEngine(), places, timing=False).finish("stopped")
        return 0
    try:
        session.run()
    finally:
        engine.close()  # the grade standing by for the next save
    return 0  # the interview ran and its report is written, whatever the verdicts


# --------------------------------------------------------------------------- progress

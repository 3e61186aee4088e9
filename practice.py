#!/usr/bin/env python3
"""The practice loop around the grader: watch, hint, reset, diff, mock, progress.

    python practice.py watch    [--kata NAME] [--seed N] [--device cpu|cuda|auto] [--no-timing] [--engine E]
    python practice.py hint     --kata NAME
    python practice.py reset    --kata NAME
    python practice.py diff     --kata NAME
    python practice.py mock     [--n 3] [--minutes M] [--seed N] [--no-timing] [--engine E]
    python practice.py progress

(`make watch`, `make hint KATA=...` and so on call these.) Empty option values count as
not given, so the Makefile can pass `--kata "$(KATA)"` whether KATA is set or not.

Where things live: the learner's kata files in katas/ (or $KATAS_DIR), the learner's state
in .katas/ (or $KATAS_STATE, git-ignored): history.jsonl (append-only, one JSON record a
line), hints.json (hints used per kata), attempts/<kata>/<timestamp>.py (what `reset`
kept) and mock/<timestamp>/ (one folder per mock interview: its stubs, its plan, its
hints and its report).

Speed: `watch` and `mock` import torch and pytest once, then grade each save in a forked
child of that process (os.fork), in a session of its own, under the grader's wall-clock
limit, with the grader's pytest options and its results file; `grader.classify` turns the
results into the verdict. The parent never runs a tensor op: a fork after torch has
started its OpenMP threads hangs in the child, so the engine checks its thread count
before each fork and falls back to a fresh process per grade (`grader.grade_kata`) when
it grew, when os.fork is missing, or when KATAS_ENGINE=process.

Exit status: 0 on success (a mock that ran to its report is a success, whatever its
verdicts), 1 when `diff` finds that the kata does not pass, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import hashlib
import importlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

import grader
from grader import ROOT, Kata, KataResult, UsageError

SOLUTIONS = ROOT / "solutions"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
POLL_SECONDS = 0.3
SETTLE_SECONDS = 0.03  # a file still changing this long after a change is graded at the next poll
TIME_LIMIT, TEST_TIMEOUT = grader.TIME_LIMIT, grader.TEST_TIMEOUT  # the grader's defaults
SPARKS = "▁▂▃▄▅▆▇█"


# --------------------------------------------------------------------------- places


@dataclass
class Places:
    """Where the learner's kata files and the learner's state live (tests point both at tmp_path)."""

    katas: Path
    state: Path

    @classmethod
    def default(cls) -> Places:
        katas = os.environ.get("KATAS_DIR") or str(ROOT / "katas")
        state = os.environ.get("KATAS_STATE") or str(ROOT / ".katas")
        return cls(Path(katas).resolve(), Path(state).resolve())

    @property
    def history(self) -> History:
        return History(self.state / "history.jsonl")

    @property
    def hints(self) -> Path:
        return self.state / "hints.json"

    @property
    def attempts(self) -> Path:
        return self.state / "attempts"

    @property
    def mocks(self) -> Path:
        return self.state / "mock"

    def kata_file(self, name: str) -> Path:
        return self.katas / f"{name}.py"


def shown(path: Path) -> str:
    """A path as the learner would type it: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` as a whole: a reader (or an interrupted run) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def read_json(path: Path, default):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment).strftime("%Y%m%d-%H%M%S")


def fresh_path(folder: Path, stem: str, suffix: str = "") -> Path:
    """folder/stem+suffix, or folder/stem-2+suffix... when taken."""
    candidate, number = folder / f"{stem}{suffix}", 1
    while candidate.exists():
        number += 1
        candidate = folder / f"{stem}-{number}{suffix}"
    return candidate


def clock(seconds: float | None) -> str:
    """12:05 (minutes:seconds), or 1:02:05 past an hour; '-' for None."""
    if seconds is None:
        return "-"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def fingerprint(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


# --------------------------------------------------------------------------- history


class History:
    """Append-only JSON lines. Each record is one write(2) of one line to a file opened with
    O_APPEND, then fsync: concurrent writers do not interleave, and an interrupted write
    can only leave a torn last line, which readers skip (and the next append starts on a
    line of its own)."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, record: dict) -> None:
        record = dict(record)
        record = {"ts": round(record.pop("ts", time.time()), 3), **record}
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line: do not glue onto it
                line = b"\n" + line
            written = os.write(fd, line)
            while written < len(line):  # regular files take it whole; be safe anyway
                written += os.write(fd, line[written:])
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[dict]:
        try:
            data = self.path.read_bytes()
        except OSError:
            return []
        records = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a torn or damaged line: skip it, keep the rest
                continue
            if isinstance(record, dict) and "event" in record:
                records.append(record)
        return records


def grade_record(result: KataResult, *, source: str, seed: int, sha: str | None, now: float, **extra) -> dict:
    record = {
        "ts": now,
        "event": "grade",
        "source": source,
        "kata": result.name,
        "status": result.status,
        "score": round(result.score, 4),
        "passed": result.passed,
        "total": result.total,
        "seed": seed,
    }
    if sha:
        record["sha"] = sha
    record.update(extra)
    return record


def record_check(results: list[KataResult], impl_dir: Path, seed: int, source: str = "check") -> None:
    """For grader.py: record `make check`/`make grade` verdicts of the learner's own katas/
    in the history (results of other folders, such as solutions/, are not the learner's)."""
    places = Places.default()
    if Path(impl_dir).resolve() != places.katas:
        return
    history, now = places.history, time.time()
    for result in results:
        try:
            sha = fingerprint(places.kata_file(result.name).read_bytes())
        except OSError:
            sha = None
        history.append(grade_record(result, source=source, seed=seed, sha=sha, now=now))


# --------------------------------------------------------------------------- catalog


def load_catalog() -> list[Kata]:
    try:
        return grader.load_catalog()
    except (OSError, ValueError, TypeError) as error:
        raise UsageError(f"info.toml could not be read: {error}") from None


def find_kata(catalog: list[Kata], name: str | None, *, example: str) -> Kata:
    names = [k.name for k in catalog]
    if not name:
        raise UsageError(f"name the kata, e.g. {example} (the katas: {', '.join(names)})")
    for kata in catalog:
        if kata.name == name:
            return kata
    raise UsageError(f"unknown kata {name!r}; the katas are: {', '.join(names)}")


def solution_text(name: str) -> str:
    return (SOLUTIONS / f"{name}.py").read_text(encoding="utf-8")


def stub_text(name: str) -> str:
    return grader.make_stub(solution_text(name))


def without_markers(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if line.strip() not in MARKERS)


# --------------------------------------------------------------------------- engines


def thread_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


# What a kata's tests import on their first run; imported once by the watching process so
# that each forked grade starts warm. torch.fx.experimental.symbolic_shapes and
# torch._dynamo are what the first operation on a "meta" tensor imports (two seconds).
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
    "torch._dynamo",
    "pytest",
)


def run_forked(target: Callable[[], int], *, time_limit: float, log_path: Path) -> tuple[int | None, bool]:
    """Run `target()` in a forked child, in a new session, output to `log_path`; kill the
    child's whole process group once it exits or after `time_limit` s. Returns (the exit
    code, or None when killed for time; timed_out), as grader.run_isolated does."""
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            try:
                os.setsid()
            except OSError:  # the parent made us a group leader first: a group is enough
                pass
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.chdir(ROOT)
            sys.dont_write_bytecode = True
            os.environ.update(PYTHONDONTWRITEBYTECODE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
            code = int(target() or 0)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 - report anything, then leave
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    os.close(log_fd)
    try:
        os.setpgid(pid, pid)  # no window in which a kill of its group could miss it
    except OSError:
        pass
    deadline, pause, timed_out, status = time.monotonic() + time_limit, 0.002, False, None
    try:
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(pause)
            pause = min(pause * 1.5, 0.02)
    finally:
        try:  # whatever the kata spawned dies with it, whatever happened
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _, status = os.waitpid(pid, 0)
    return (None if timed_out else os.waitstatus_to_exitcode(status)), timed_out


class ProcessEngine:
    """Each grade in a fresh process: exactly `make check` (about three seconds, torch's import)."""

    kind = "process"

    def __init__(self, *, device: str = "cpu", time_limit: float = TIME_LIMIT, test_timeout: float = TEST_TIMEOUT):
        self.device, self.time_limit, self.test_timeout = device, time_limit, test_timeout

    def prepare(self) -> None:
        pass

    def grade(self, name: str, path: Path, seed: int) -> KataResult:
        return grader.grade_kata(
            name,
            path,
            seed=seed,
            device=self.device,
            time_limit=self.time_limit,
            test_timeout=self.test_timeout,
            threads=None,
        )

    def time(self, result: KataResult, path: Path) -> None:
        try:
            grader.time_passing([result], {result.name: path}, device=self.device, per_kata_limit=self.time_limit)
        except OSError as error:
            result.timing = {"error": f"timing failed: {error}"}


class ForkEngine(ProcessEngine):
    """Imports torch and pytest once; each grade runs pytest.main in a forked child.

    The child starts from the parent's imports (no torch import to pay), runs the kata's
    test file with the grader's options (--impl, --seed, --device, --results, per-test
    timeout, memory and output limits) in a session of its own, and exits; the parent
    waits under the wall-clock limit, kills the group, and classifies the results file
    with grader.classify. Each grade is a new process, so no module (the kata's, the
    test's) is ever stale, unlike repeated pytest.main calls in one process.
    """

    kind = "fork"

    def __init__(self, **options):
        super().__init__(**options)
        self.ready = False
        self.baseline: int | None = None
        self.fallback_reason = ""
        self.prepare_seconds = 0.0

    def prepare(self) -> None:
        if self.ready:
            return
        start = time.perf_counter()
        for module in WARM_MODULES:  # only a speed-up: a child imports whatever is missing
            with contextlib.suppress(Exception):
                importlib.import_module(module)
        with contextlib.suppress(Exception):
            from _pytest.config import default_plugins

            for plugin in default_plugins:
                importlib.import_module(f"_pytest.{plugin}")
        # Objects that exist now are never collected in a child: without this, pytest's
        # gc.collect() at exit walks (and copies, page by page) torch's whole heap: 1.5 s.
        gc.collect()
        gc.freeze()
        self.baseline = thread_count()
        self.prepare_seconds = time.perf_counter() - start
        self.ready = True

    def fork_is_safe(self) -> bool:
        if self.fallback_reason:
            return False
        count = thread_count()
        if self.baseline is not None and count is not None and count > self.baseline:
            self.fallback_reason = (
                f"this process started threads ({count}, was {self.baseline}): a fork could hang, "
                "so each grade now runs in a fresh process"
            )
            return False
        return True

    def grade(self, name: str, path: Path, seed: int) -> KataResult:
        self.prepare()
        if not self.fork_is_safe():
            return super().grade(name, path, seed)
        with tempfile.TemporaryDirectory(prefix=f"kata-{name}-") as scratch:
            results, log = Path(scratch) / "results.jsonl", Path(scratch) / "output.log"
            args = grader.pytest_args(
                name, path, seed=seed, device=self.device, results=results, test_timeout=self.test_timeout
            )

            def child() -> int:
                import pytest

                return int(pytest.main(args))

            returncode, timed_out = run_forked(child, time_limit=self.time_limit, log_path=log)
            return grader.classify(
                name,
                grader.read_events(results),
                returncode,
                timed_out,
                grader.crash_details(log, path),
                self.time_limit,
            )

    def time(self, result: KataResult, path: Path) -> None:
        """grader's own timing (`grader.py _time`: torch.utils.benchmark, kata and reference
        on the same inputs), run in a forked child instead of a fresh process."""
        self.prepare()
        if not self.fork_is_safe():
            return super().time(result, path)
        with tempfile.TemporaryDirectory(prefix="kata-timing-") as scratch:
            out, log = Path(scratch) / "timing.jsonl", Path(scratch) / "output.log"
            argv = ["--device", self.device, "--out", str(out), "--kata", f"{result.name}={path}"]
            _, timed_out = run_forked(lambda: grader.time_command(argv), time_limit=self.time_limit + 10, log_path=log)
            grader.collect_timings([result], out, log, timed_out)


def make_engine(kind: str = "auto", **options) -> ProcessEngine:
    kind = os.environ.get("KATAS_ENGINE") or kind
    if kind == "process" or not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return ProcessEngine(**options)
    return ForkEngine(**options)


# --------------------------------------------------------------------------- verdicts


def colour_enabled(out: TextIO) -> bool:
    return hasattr(out, "isatty") and out.isatty() and not os.environ.get("NO_COLOR")


def first_failure(result: KataResult, width: int = 600) -> str:
    """The first failing check's message for a fail; the verdict's own message otherwise."""
    if result.status == "fail" and result.failures:
        first = result.failures[0]
        text = f"{first['name']}: {first.get('message', '')}"
    else:
        text = result.message
    lines = text.strip().splitlines()
    text = "\n".join(lines[:6]) + ("\n..." if len(lines) > 6 else "")
    return text if len(text) <= width else text[:width] + " ..."


def verdict_block(result: KataResult, *, label: str, seed: int, colour: bool, latency: float | None) -> list[str]:
    status = grader.paint(result.status, result.status, colour)
    head = f"{label}: {status}  {result.passed}/{result.total} tests"
    if latency is not None:
        head += f"  (verdict {latency:.1f} s after the save)"
    lines = [head]
    indent = "    "
    if result.status != "pass":
        kind = "first failing check" if result.status == "fail" else "why"
        lines.append(f"{indent}{kind}: " + first_failure(result).replace("\n", "\n" + indent + "  "))
        if result.failures and result.failures[0].get("output"):
            lines.append(f"{indent}it printed: {result.failures[0]['output']!r}")
        if result.status == "fail":
            lines.append(f"{indent}(hidden shapes from seed {seed}: the same until you restart)")
    return lines


# --------------------------------------------------------------------------- watch


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
                    self.say(f"{shown(self.path(name))} was removed (make reset KATA={name} brings the stub back)")
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
        result = self.engine.grade(name, path, self.seed)
        fallback = getattr(self.engine, "fallback_reason", "")
        if fallback and not self.fallback_said:
            self.fallback_said = True
            self.say(f"note: {fallback}")
        latency = None
        if after_save and seen is not None and self.now is time.time:  # seconds from the save to the verdict
            latency = max(0.0, time.time() - seen.mtime_ns / 1e9)
            self.latencies.append(latency)
        stamp_text = datetime.fromtimestamp(self.now()).strftime("%H:%M:%S")
        self.say(
            *verdict_block(result, label=f"[{stamp_text}] {name}", seed=self.seed, colour=self.colour, latency=latency)
        )
        self.history.append(
            grade_record(
                result, source=self.source, seed=self.seed, sha=seen.sha if seen else None, now=self.now(), **self.extra
            )
        )
        self.on_verdict(result)  # before timing: the verdict is what counts
        if result.status == "pass" and self.timing:
            self.engine.time(result, path)
            self.say(f"    time vs PyTorch: {grader.format_timing(result.timing) or 'not measured'}")
        return result

    def say(self, *lines: str) -> None:
        self.before_output()
        print("\n".join(lines), file=self.out, flush=True)

    def run(self, *, interval: float = POLL_SECONDS, sleep: Callable[[float], None] = time.sleep) -> None:
        while True:
            self.poll()
            sleep(interval)


def watch_command(args: argparse.Namespace, places: Places) -> int:
    catalog = load_catalog()
    names = [find_kata(catalog, args.kata, example="").name] if args.kata else [k.name for k in catalog]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    if not places.katas.is_dir():
        raise UsageError(f"{places.katas}: no such folder of katas")
    engine = make_engine(args.engine, device=args.device)
    what = names[0] if args.kata else f"{len(names)} katas"
    print(f"Loading torch and pytest once ({engine.kind} engine)...", flush=True)
    started = time.perf_counter()
    engine.prepare()
    watcher = Watcher(engine, places.katas, names, seed=seed, history=places.history, timing=not args.no_timing)
    try:
        print(
            f"Watching {what} in {shown(places.katas)}/ (seed {seed}; ready in {time.perf_counter() - started:.1f} s). "
            "Save a file to grade it; make hint KATA=name when stuck; Ctrl-C stops.",
            flush=True,
        )
        if args.kata and watcher.path(names[0]).exists():
            watcher.grade(names[0])
        watcher.run(interval=args.interval)
    except KeyboardInterrupt:
        pass
    if watcher.latencies:
        typical = sorted(watcher.latencies)[len(watcher.latencies) // 2]
        print(f"\nStopped watching: {len(watcher.latencies)} grades, median {typical:.1f} s from save to verdict. Bye!")
    else:
        print("\nStopped watching. Bye!")
    return 0


# --------------------------------------------------------------------------- hints (and mock plans: hints
# asked for during a mock interview count for the mock)


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

    @property
    def deadline(self) -> float:
        return self.started + self.minutes * 60

    def save(self) -> None:
        data = {k: getattr(self, k) for k in ("id", "seed", "katas", "minutes", "started", "state", "pid")}
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
    """The mock interview running now, if any: its hints count for the mock."""
    if not places.mocks.is_dir():
        return None
    for folder in sorted(places.mocks.iterdir(), reverse=True):
        plan = MockPlan.load(folder)
        if plan and plan.state == "running" and now < plan.deadline and process_alive(plan.pid):
            return plan
    return None


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
    places.history.append(
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


def hints_used(places: Places) -> dict[str, int]:
    return {k: int(v) for k, v in read_json(places.hints, {}).items()}


# --------------------------------------------------------------------------- reset and diff


def reset_command(args: argparse.Namespace, places: Places, out: TextIO | None = None, now: float | None = None) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    kata = find_kata(catalog, args.kata, example="make reset KATA=causal_mask")
    now = time.time() if now is None else now
    target, stub = places.kata_file(kata.name), stub_text(kata.name)
    current = target.read_text(encoding="utf-8") if target.exists() else None
    if current == stub:
        print(f"{shown(target)} is already the stub as shipped; nothing to keep.", file=out)
        return 0
    kept = None
    if current is not None:
        folder = places.attempts / kata.name
        folder.mkdir(parents=True, exist_ok=True)
        kept = fresh_path(folder, stamp(now), ".py")
        kept.write_bytes(target.read_bytes())  # first the copy: nothing is lost if the next step fails
        with open(kept, "rb") as file:
            os.fsync(file.fileno())
        print(f"Kept your attempt: {shown(kept)}", file=out)
    write_atomically(target, stub)
    places.history.append({"ts": now, "event": "reset", "kata": kata.name, "kept": str(kept) if kept else None})
    print(f"Restored {shown(target)} to the stub as shipped.", file=out)
    return 0


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
        raise UsageError(f"{shown(target)} does not exist; make reset KATA={kata.name} writes the stub")
    learner = target.read_text(encoding="utf-8", errors="replace")
    solution = without_markers(solution_text(kata.name))
    lines = unified_diff(learner, solution, f"{shown(target)} (yours)", f"solutions/{kata.name}.py (reference)")
    if lines:
        out.write(paint_diff(lines, colour_enabled(out)))
    else:
        print(f"No difference: {shown(target)} is the reference solution.", file=out)
    out.flush()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    engine = engine or ProcessEngine(device=args.device)
    print(f"\nGrading your {kata.name} (seed {seed})...", file=out, flush=True)
    result = engine.grade(kata.name, target, seed)
    places.history.append(
        grade_record(result, source="diff", seed=seed, sha=fingerprint(target.read_bytes()), now=time.time())
    )
    for line in verdict_block(result, label=kata.name, seed=seed, colour=colour_enabled(out), latency=None):
        print(line, file=out)
    print(f"{kata.name} {'passes' if result.status == 'pass' else 'does not pass yet'}.", file=out)
    return 0 if result.status == "pass" else 1


# --------------------------------------------------------------------------- mock interviews


def pick_katas(catalog: list[Kata], n: int, seed: int) -> list[Kata]:
    """n katas, mixing difficulties: the tiers (katas of one difficulty) in a seeded order,
    one kata from each in turn, so n katas span min(n, tiers) difficulties. Easiest first."""
    if not 1 <= n <= len(catalog):
        raise UsageError(f"N={n}: pick from 1 to {len(catalog)} katas")
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
    places.mocks.mkdir(parents=True, exist_ok=True)
    folder = fresh_path(places.mocks, stamp(now))
    folder.mkdir()
    for kata in picked:
        (folder / f"{kata.name}.py").write_text(stub_text(kata.name), encoding="utf-8")
    total = minutes if minutes is not None else float(sum(k.minutes for k in picked))
    plan = MockPlan(folder.name, folder, seed, [k.name for k in picked], total, now, pid=os.getpid())
    plan.save()
    return plan


def task_list(plan: MockPlan, catalog: list[Kata]) -> str:
    by_name = {k.name: k for k in catalog}
    width = max(len(name) for name in plan.katas)
    lines = [
        f"Mock interview {plan.id}: {len(plan.katas)} katas in {clock(plan.minutes * 60)} (seed {plan.seed})",
        f"Workspace: {shown(plan.folder)}/   (your katas/ are not touched)",
        "",
    ]
    for number, name in enumerate(plan.katas, 1):
        kata = by_name[name]
        stars = "★" * kata.difficulty + "☆" * (5 - kata.difficulty)
        lines.append(f"  {number}. {name:<{width}}  {stars}  {kata.minutes:>3} min  {kata.title}")
        lines.append(f"     {shown(plan.folder / (name + '.py'))}")
    lines += [
        "",
        "Edit the files above; each save is graded. Stuck? make hint KATA=name (counted in the report).",
        "It ends when every kata passes, when time is up, or at Ctrl-C.",
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
            history=places.history,
            out=out,
            now=now,
            source="mock",
            timing=timing,
            extra={"mock": plan.id},
        )
        self.watcher.before_output = self.clear_countdown
        self.watcher.on_verdict = self.note

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
        text = f"  {clock(left)} left   {passing} of {len(self.plan.katas)} pass"
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
        self.places.history.append(dict(report))
        print("\n" + text, file=self.out, flush=True)
        return report


def report_text(report: dict) -> str:
    reasons = {"all pass": "every kata passes", "time is up": "time is up", "stopped": "you stopped"}
    width = max([len(k["kata"]) for k in report["katas"]] + [4])
    lines = [
        (
            f"Mock interview {report['mock']} report: {reasons.get(report['reason'], report['reason'])} after "
            f"{clock(report['elapsed_s'])} of {clock(report['minutes'] * 60)} (seed {report['seed']})"
        ),
        "",
        (
            f"{'kata':<{width}}  {'result':<7} {'score':>5}  {'passed at':>9}  {'took':>6}  {'suggested':>9}  "
            f"{'vs':>5}  hints"
        ),
    ]
    for k in report["katas"]:
        ratio = "-" if k["vs_suggested"] is None else f"{k['vs_suggested']:.2f}x"
        lines.append(
            f"{k['kata']:<{width}}  {k['status']:<7} {k['best_score']:>5.0%}  {clock(k['first_pass_s']):>9}  "
            f"{clock(k['solve_s']):>6}  {k['suggested_minutes']:>5} min  {ratio:>5}  {k['hints']}"
        )
    lines += [
        "",
        (
            f"{report['passed']} of {len(report['katas'])} pass; score {report['score']:.0f} / 100 "
            "(the best score of each kata during the interview)."
        ),
        "took: from the previous first pass (or the start) to this kata's; vs: took / suggested minutes.",
    ]
    return "\n".join(lines)


def mock_command(args: argparse.Namespace, places: Places) -> int:
    catalog = load_catalog()
    if args.n > len(catalog):
        raise UsageError(f"N={args.n}: there are only {len(catalog)} katas")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    started = time.perf_counter()
    plan = start_mock(places, catalog, n=args.n, minutes=args.minutes, seed=seed, now=time.time())
    print(task_list(plan, catalog), flush=True)
    print(
        f"The clock runs from now (tasks ready in {time.perf_counter() - started:.2f} s); "
        "the judge loads torch meanwhile.",
        flush=True,
    )
    engine = make_engine(args.engine, device=args.device)
    try:
        engine.prepare()  # torch, while the learner reads the tasks
        session = MockSession(plan, catalog, engine, places, timing=not args.no_timing, interval=args.interval)
        print(f"Judge ready {time.perf_counter() - started:.1f} s after the start.", flush=True)
    except KeyboardInterrupt:
        MockSession(plan, catalog, ProcessEngine(), places, timing=False).finish("stopped")
        return 0
    session.run()
    return 0  # the interview ran and its report is written, whatever the verdicts


# --------------------------------------------------------------------------- progress


def sparkline(scores: list[float]) -> str:
    return "".join(SPARKS[min(len(SPARKS) - 1, int(score * (len(SPARKS) - 1) + 0.5))] for score in scores)


def progress_rows(records: list[dict], catalog: list[Kata], hints: dict[str, int]) -> list[dict]:
    rows = []
    for kata in catalog:
        grades = [r for r in records if r.get("event") == "grade" and r.get("kata") == kata.name]
        solves = [
            k.get("solve_s")
            for r in records
            if r.get("event") == "mock"
            for k in r.get("katas", [])
            if k.get("kata") == kata.name and k.get("solve_s") is not None
        ]
        scores = [float(r.get("score", 0)) for r in grades]
        versions = {r.get("sha") or f"#{i}" for i, r in enumerate(grades)}
        rows.append(
            {
                "kata": kata.name,
                "best": max(scores) if scores else None,
                "attempts": len(versions),
                "last": grades[-1]["status"] if grades else None,
                "fastest_mock_s": min(solves) if solves else None,
                "trend": scores[-12:],
                "hints": hints.get(kata.name, 0),
                "hints_total": len(kata.hints),
            }
        )
    return rows


def progress_text(records: list[dict], catalog: list[Kata], hints: dict[str, int], history_path: Path) -> str:
    if not records:
        return (
            f"No history yet ({shown(history_path)}). Grades from make watch, make check, make diff and "
            "make mock are recorded there."
        )
    rows = progress_rows(records, catalog, hints)
    width = max(len(r["kata"]) for r in rows)
    lines = [
        f"Progress from {shown(history_path)} ({len(records)} records)",
        "",
        f"{'kata':<{width}}  {'best':>5}  {'attempts':>8}  {'last':<9} {'hints':>5}  {'fastest mock':>12}  trend",
    ]
    for r in rows:
        best = "-" if r["best"] is None else f"{r['best']:.0%}"
        trend = sparkline(r["trend"])
        if len(r["trend"]) >= 2:
            trend += "  " + ("↑" if r["trend"][-1] > r["trend"][0] else "↓" if r["trend"][-1] < r["trend"][0] else "→")
        lines.append(
            f"{r['kata']:<{width}}  {best:>5}  {r['attempts']:>8}  {r['last'] or '-':<9} "
            f"{r['hints']:>2}/{r['hints_total']:<2}  {clock(r['fastest_mock_s']):>12}  {trend}".rstrip()
        )
    mocks = [r for r in records if r.get("event") == "mock"]
    lines.append("")
    if mocks:
        last = mocks[-1]
        when = datetime.fromtimestamp(last.get("ts", 0)).strftime("%Y-%m-%d %H:%M")
        scores = " ".join(f"{m.get('score', 0):.0f}" for m in mocks[-8:])
        lines.append(
            f"Mock interviews: {len(mocks)}; last {when}: {last.get('passed', 0)} of {len(last.get('katas', []))} pass, "
            f"score {last.get('score', 0):.0f}. Scores, oldest first: {scores}"
        )
    else:
        lines.append("No mock interview yet: make mock")
    lines.append(
        "best: the highest score graded; attempts: versions of the file graded; trend: recent scores, oldest first."
    )
    return "\n".join(lines)


def progress_command(args: argparse.Namespace, places: Places, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    catalog = load_catalog()
    print(progress_text(places.history.read(), catalog, hints_used(places), places.history.path), file=out)
    return 0


# --------------------------------------------------------------------------- command line


class PracticeArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (see: python practice.py --help)")


def optional_int(what: str, minimum: int):
    def parse(text: str) -> int | None:
        if text.strip() == "":
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {value}")
        return value

    return parse


def optional_minutes(text: str) -> float | None:
    if text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"MINUTES must be a number of minutes, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"MINUTES must be more than 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--interval must be a number of seconds, got {text!r}") from None
    if not 0 < value < 60:
        raise argparse.ArgumentTypeError(f"--interval must be between 0 and 60 seconds, got {text!r}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = PracticeArgumentParser(
        prog="practice.py",
        description="The practice loop: watch, hint, reset, diff, mock, progress.",
        epilog="Learner state: .katas/ (or $KATAS_STATE); kata files: katas/ (or $KATAS_DIR).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=PracticeArgumentParser)
    commands.required = True

    def kata_option(sub, required_text: str):
        sub.add_argument("--kata", default="", metavar="NAME", help=required_text)

    def engine_options(sub):
        sub.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu", help="where the tests run")
        sub.add_argument(
            "--engine",
            choices=("auto", "fork", "process"),
            default="auto",
            help="fork: grade in forked children of one warm process (default on Linux); "
            "process: a fresh process per grade",
        )
        sub.add_argument("--no-timing", action="store_true", help="skip the time vs PyTorch of passing katas")
        sub.add_argument("--interval", type=positive_seconds, default=POLL_SECONDS, help="seconds between polls")

    watch = commands.add_parser("watch", help="re-grade each kata you save")
    kata_option(watch, "watch only this kata (default: all of them)")
    watch.add_argument("--seed", type=optional_int("SEED", 0), default=None)
    engine_options(watch)

    for name, text in (
        ("hint", "show one more hint"),
        ("reset", "keep your attempt, restore the stub"),
        ("diff", "your file against the reference, then grade it"),
    ):
        sub = commands.add_parser(name, help=text)
        kata_option(sub, "the kata (required)")
        if name == "diff":
            sub.add_argument("--seed", type=optional_int("SEED", 0), default=None)
            sub.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")

    mock = commands.add_parser("mock", help="a timed mock interview")
    mock.add_argument("--n", type=optional_int("N", 1), default=None, help="how many katas (default 3)")
    mock.add_argument(
        "--minutes",
        type=optional_minutes,
        default=None,
        help="time allowed in all (default: the katas' suggested minutes added up)",
    )
    mock.add_argument("--seed", type=optional_int("SEED", 0), default=None, help="repeat a mock's choice of katas")
    engine_options(mock)

    commands.add_parser("progress", help="best score, attempts, mock times and trend per kata")
    args = parser.parse_args(argv)
    if args.command == "mock" and args.n is None:
        args.n = 3
    return args


COMMANDS = {
    "watch": watch_command,
    "hint": hint_command,
    "reset": reset_command,
    "diff": diff_command,
    "mock": mock_command,
    "progress": progress_command,
}


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        return COMMANDS[args.command](args, Places.default())
    except UsageError as error:
        print(f"practice.py: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nStopped. Bye!", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

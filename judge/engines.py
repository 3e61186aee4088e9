"""Grading one kata file, or timing it: in a fresh process, or in a child forked from a warm one.

Both engines run the same thing, pytest on the kata's test module with the grader's
options and the results file the grader owns, under isolation's supervision, and
classify the outcome with verdicts.classify. The process engine pays for importing torch
each time (about three seconds); the fork engine imports torch and pytest once and forks
a child per grade (about half a second for a small kata). Each grade is a new process
either way, so no module (the kata's, the test's) is ever stale.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from judge import shards as sharding
from judge.isolation import (
    Started,
    crash_details,
    finish,
    finish_all,
    keep_to_myself,
    log_tail,
    start_forked,
    start_process,
    stop,
    thread_count,
)
from judge.language import speaking
from judge.limits import DEFAULT, Limits, limits_for
from judge.paths import ROOT, test_file
from judge.protocol import DIAGNOSED_FAILURES, KataResult, Timing, read_events
from judge.templates import Template
from judge.verdicts import classify
from judge.warm import warm_up

# pytest's options for every kata process: no cache files, no plugin but ours (a user's own
# Python may carry plugins that reorder or skip tests), our own addopts only, one-line
# tracebacks (the plugin writes each failure's message itself, and pytest's long ones, parsing
# every file on the stack, cost a stub with 30 failing tests a second), and no assertion
# rewriting (the kata tests' messages are their own; rewriting recompiled a test module per grade).
PYTEST_FLAGS = ("-p", "no:cacheprovider", "-o", "addopts=", "-q", "--tb=line", "--assert=plain")


def grade_options(path: Path, *, seed: int, results: Path, limits: Limits, first_failure: bool = False) -> dict:
    """The values of a grade's own pytest options (by their names in pytest's config.option),
    for the kata file at `path`: what a template's copy takes (judge.templates), and what
    pytest_args writes as flags. `first_failure` stops at the first failed test (enough to
    reject a mutant, at a fraction of the cost), or, while the failures' diagnoses each name
    several slips, at the one that names one (as a full grade shows: protocol.most_specific)."""
    return {
        "impl": str(path),
        "seed": seed,
        "results": str(results),
        "results_private": PRIVATE_RESULTS,  # read through /proc/self/fd: Linux
        "memory_limit_mb": limits.memory_mb,
        "output_limit_mb": limits.output_mb,
        "maxfail": DIAGNOSED_FAILURES if first_failure else 0,  # and it stops sooner: plugin.stop_early
    }


def template_args(name: str, device: str) -> list[str]:
    """pytest's arguments shared by every grade of kata `name`: a template's (judge.templates)."""
    return [str(test_file(name)), *PYTEST_FLAGS, "--device", device]


def pytest_args(
    name: str,
    path: Path,
    *,
    seed: int,
    device: str,
    results: Path,
    limits: Limits,
    timing: bool = False,
    first_failure: bool = False,
    shard: str | None = None,
) -> list[str]:
    """pytest's arguments for grading (or timing) the kata file at `path` (grade_options as
    flags); `shard` ("i/n") runs only that shard of the tests (judge.shards)."""
    options = grade_options(path, seed=seed, results=results, limits=limits, first_failure=first_failure)
    args = template_args(name, device)
    args += ["--impl", options["impl"], "--seed", str(options["seed"]), "--results", options["results"]]
    args += ["--results-private"] if options["results_private"] else []
    args += [f"--memory-limit-mb={options['memory_limit_mb']}", f"--output-limit-mb={options['output_limit_mb']}"]
    args += ["--shard", shard] if shard else []
    return args + (["--kata-timing"] if timing else []) + ([f"--maxfail={options['maxfail']}"] if first_failure else [])


def kata_env(threads: int | None = None, extra: dict | None = None) -> dict:
    """The environment of a grade: this one's, with `extra` (the test suite's switches) on top."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.update(extra or {})
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


PRIVATE_RESULTS = Path("/proc/self/fd").is_dir()


@contextlib.contextmanager
def kept_open(results: Path):
    """The results file, created and held open here: the judging process deletes its name as
    soon as it has opened it (--results-private), so no kata process can find it by name;
    the grader reads it through its own descriptor (/proc/self/fd/N)."""
    fd = os.open(results, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        proc = Path(f"/proc/self/fd/{fd}")
        yield proc if proc.exists() else results
    finally:
        os.close(fd)


def private_copy(path: Path, folder: Path) -> Path:
    """A copy of the kata file under the same name in `folder`; the file itself if it cannot
    be read (the grade then says why)."""
    folder.mkdir(exist_ok=True)
    try:
        return Path(shutil.copy2(path, folder / path.name))
    except OSError:
        return path


def shown_as(result: KataResult, copy: Path, original: Path) -> KataResult:
    """The result with every mention of the private copy's path put back as the learner's."""
    if copy == original:
        return result
    text = json.dumps(result.to_json(internal=True)).replace(
        json.dumps(str(copy))[1:-1], json.dumps(str(original))[1:-1]
    )
    return KataResult.from_json(json.loads(text))


@dataclass
class Shard:
    """One judging process's part of a grade: its log, results file and kata copy."""

    log: Path
    results: Path
    copy: Path


class Pending:
    """A grade whose judging processes are started (one per shard): `end` supervises them to
    their end and reads the verdict. A gated one (make watch's standby, ProcessEngine.stand_by)
    waits, its tests collected, until `open` copies the kata file in and lets it run."""

    def __init__(self, name: str, limits: Limits, scratch: tempfile.TemporaryDirectory, stack: contextlib.ExitStack):
        self.name, self.limits, self.scratch, self.stack = name, limits, scratch, stack
        self.parts: list[Shard] = []
        self.starts: list[Started] = []
        self.gates: list[int] = []  # the write end of each gated judging process's gate

    def open(self, path: Path) -> bool:
        """Copy the kata file in and let the tests run; False if it could not be copied."""
        for part in self.parts:
            if private_copy(path, part.copy.parent) != part.copy:
                return False
        for gate in self.gates:
            with contextlib.suppress(OSError):  # a judging process that already died is graded as such
                os.write(gate, b"go")
            os.close(gate)
        self.gates = []
        return True

    def end(self, path: Path) -> KataResult:
        """The verdict, once every judging process has ended (or was stopped at a limit)."""
        try:
            options = {"time_limit": self.limits.time_limit, "test_timeout": self.limits.test_timeout}
            runs = [(started, options | {"events": part.results}) for started, part in zip(self.starts, self.parts)]
            ends = finish_all(runs)
            events, decider = sharding.combine([(read_events(p.results), end) for p, end in zip(self.parts, ends)])
            part = self.parts[decider]
            result = classify(self.name, events, ends[decider], crash_details(part.log, part.copy), self.limits)
            for part in self.parts:
                result = shown_as(result, part.copy, path)
            return result
        finally:
            self.close()

    def discard(self) -> None:
        """Stop the judging processes unheard (closing a gate ends one that waits) and clean up."""
        for gate in self.gates:
            os.close(gate)
        self.gates = []
        for started in self.starts:
            stop(started)
        self.close()

    def close(self) -> None:
        self.stack.close()
        self.scratch.cleanup()


class ProcessEngine:
    """Each grade in a fresh process, exactly as `make check` runs it.

    `shards` > 1 splits each grade's tests over that many judging processes run at once
    (judge.shards): a single kata's verdict on several cores. A grade that stops at its
    first failure (a mutant's) runs whole."""

    kind = "process"

    def __init__(
        self,
        *,
        device: str = "cpu",
        limits: Limits = DEFAULT,
        threads: int | None = None,
        env: dict | None = None,
        shards: int = 1,
    ):
        self.device, self.limits, self.threads, self.env = device, limits, threads, env
        self.shards = max(1, shards)
        self.fallback_reason = ""
        self.standby: tuple[tuple, Pending] | None = None
        keep_to_myself()  # a kata process cannot reach the results files it holds open

    def prepare(self) -> None:
        pass

    def warm_for(self, kata: str) -> None:
        """A fresh process per grade has nothing to warm."""

    def grade(self, name: str, path: Path, seed: int, *, first_failure: bool = False) -> KataResult:
        """Under the engine's limits, raised to what the kata declares it needs, on a private
        copy of the file (which the kata may delete or rewrite as it likes), one per shard;
        by the grade standing by for it, if there is one (stand_by). Its texts in the language
        of the engine's variables where they name one (language.speaking)."""
        with speaking((self.env or {}).get("KATAS_LANG")):
            return self._grade(name, path, seed, first_failure=first_failure)

    def _grade(self, name: str, path: Path, seed: int, *, first_failure: bool) -> KataResult:
        standby, self.standby = self.standby, None
        if standby is not None and (
            standby[0] != self.grade_key(name, path, seed, first_failure) or not standby[1].open(path)
        ):
            standby[1].discard()
            standby = None
        pending = standby[1] if standby is not None else self.begin(name, path, seed, first_failure=first_failure)
        return pending.end(path)

    def stand_by(self, name: str, path: Path, seed: int) -> None:
        """Start the next grade of this kata file now, up to its tests collected, so that
        grade (make watch's next save) starts its tests at once. Replaces any other standby."""
        self.close()
        self.standby = (self.grade_key(name, path, seed, False), self.begin(name, path, seed, gated=True))

    def grade_key(self, name: str, path: Path, seed: int, first_failure: bool) -> tuple:
        """What a grade depends on besides the file's content: a standby serves only its equal."""
        return (name, path, seed, first_failure, self.limits, self.device)

    def close(self) -> None:
        """Let go of the grade standing by, if any."""
        if self.standby is not None:
            self.standby[1].discard()
            self.standby = None

    def begin(self, name: str, path: Path, seed: int, *, first_failure: bool = False, gated: bool = False) -> Pending:
        """A grade's judging processes, started: one per shard (first_failure: one), each on a
        private copy of the kata file, made now (or, gated, when the grade is opened)."""
        limits = limits_for(name, self.limits)
        self.warm_for(name)
        count = 1 if first_failure else self.shards
        pending = Pending(name, limits, tempfile.TemporaryDirectory(prefix=f"kata-{name}-"), contextlib.ExitStack())
        for index in range(count):
            folder = Path(pending.scratch.name) / (f"shard-{index}" if count > 1 else "")
            folder.mkdir(exist_ok=True)
            copy = folder / "kata" / path.name if gated else private_copy(path, folder / "kata")
            results = pending.stack.enter_context(kept_open(folder / "results.jsonl"))
            shard = sharding.option(index, count) if count > 1 else None
            args = pytest_args(
                name,
                copy,
                seed=seed,
                device=self.device,
                results=folder / "results.jsonl",
                limits=limits,
                first_failure=first_failure,
                shard=shard,
            )
            gate = None
            if gated:
                gate = os.pipe()
                os.set_inheritable(gate[0], True)  # through exec, for the process engine
                args += ["--gate", str(gate[0])]
                pending.gates.append(gate[1])
            pending.parts.append(Shard(folder / "output.log", results, copy))
            options = grade_options(
                copy, seed=seed, results=folder / "results.jsonl", limits=limits, first_failure=first_failure
            )
            started = None if gated or count > 1 else self.start_from_template(name, options, folder / "output.log")
            # no judging process holds a gate's other end (its own or an earlier shard's): the
            # grader's going, or its letting go, is an end of file at every gate
            pending.starts.append(started or self.start(args, folder / "output.log", close=tuple(pending.gates)))
            if gate:
                os.close(gate[0])
        return pending

    def time(self, result: KataResult, path: Path) -> None:
        """Time a passing kata against its reference: result.timing gets the figures, or an error."""
        self.warm_for(result.name)
        with tempfile.TemporaryDirectory(prefix=f"kata-timing-{result.name}-") as scratch:
            results, log = Path(scratch) / "results.jsonl", Path(scratch) / "output.log"
            path = private_copy(path, Path(scratch) / "kata")
            args = pytest_args(
                result.name, path, seed=0, device=self.device, results=results, limits=self.limits, timing=True
            )
            with kept_open(results) as readable:
                end = finish(self.start(args, log), time_limit=self.limits.timing_limit())
                timing = next((e.timing for e in read_events(readable) if isinstance(e, Timing)), None)
            if timing is not None:
                result.timing = timing
            elif end.timed_out:
                result.timing = {"error": "timing overran its limit"}
            else:
                result.timing = {"error": f"timing failed: {log_tail(log)}"}

    def start_from_template(self, name: str, options: dict, log: Path) -> Started | None:
        """A grade of kata `name` with these option values (grade_options), started in a copy
        of a judging process that has collected its tests (judge.templates); None: start it
        the usual way."""
        return None

    def start(self, args: list[str], log: Path, *, close: tuple[int, ...] = ()) -> Started:
        """A judging process for these pytest arguments, started (supervised by isolation.finish);
        `close`: descriptors of the grader's that it must not hold."""
        command = [sys.executable, "-m", "pytest", *args]
        return start_process(command, cwd=ROOT, env=kata_env(self.threads, self.env), log_path=log, close=close)


def _import_tests(*names: str) -> None:
    """Import these modules of tests/ (the conftest, a kata's test modules) by the names
    pytest's prepend import mode gives them."""
    from judge.paths import TESTS

    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    for name in names:
        importlib.import_module(name)


TEMPLATES_KEPT = 2  # templates a fork engine keeps, the last used: grades come a kata after another


class ForkEngine(ProcessEngine):
    """Imports torch and pytest once; each grade runs pytest.main in a forked child: a copy of
    a template that has collected the kata's tests (judge.templates), or else a child of this
    process's own.

    The warm process never runs a tensor op: a fork after torch has started its OpenMP
    threads hangs in the child. So it checks its thread count before each fork, and grades
    in fresh processes from then on if it grew."""

    kind = "fork"

    def __init__(self, **options):
        super().__init__(**options)
        self.ready = False
        self.baseline: int | None = None
        self.prepare_seconds = 0.0
        self.warmed: set[str] = set()
        self.templates: dict[tuple, Template] = {}  # the last used last
        self.untemplated: set[tuple] = set()  # whose template never started a grade

    def prepare(self) -> None:
        if self.ready:
            return
        start = time.perf_counter()
        warm_up()
        with contextlib.suppress(Exception):
            from _pytest.config import default_plugins

            for plugin in default_plugins:
                importlib.import_module(f"_pytest.{plugin}")
            import pdb  # noqa: F401 - what the debugging plugin imports at each configure

            _import_tests("conftest")  # the tests' conftest, compiled here once, not by every grade
        # Objects that exist now are never collected in a child: without this, pytest's
        # gc.collect() at exit walks (and copies, page by page) torch's whole heap: 1.5 s.
        gc.collect()
        gc.freeze()
        self.baseline = thread_count()
        self.prepare_seconds = time.perf_counter() - start
        self.ready = True

    def warm_for(self, kata: str) -> None:
        """What every grade of `kata` imports and compiles, done here once, so each forked grade
        inherits it: the kata's test modules (pytest and the kata process find them imported),
        and its known slips (what a failing grade's diagnosis replays)."""
        if kata in self.warmed:
            return
        self.warmed.add(kata)
        with contextlib.suppress(Exception):
            from judge.paths import test_file
            from judge.testing.diagnosis import slips

            where = test_file(kata)
            names = [f"{kata}.{p.stem}" for p in sorted(where.glob("test_*.py"))] if where.is_dir() else [where.stem]
            _import_tests(*names)
            slips(kata)
        gc.freeze()  # what was made now is never collected in a child either

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

    def start_from_template(self, name: str, options: dict, log: Path) -> Started | None:
        self.prepare()
        env = kata_env(self.threads, self.env)
        key = (name, self.device, tuple(sorted(env.items())))
        if key in self.untemplated or not self.fork_is_safe():
            return None
        template = self.templates.pop(key, None)
        started = template.grade(options, cwd=ROOT, env=env, log_path=log) if template else None
        if started is None:
            if template is not None:  # gone since its last grade (a kata's doing?): a new one
                template.close()
            template = Template(template_args(name, self.device), cwd=ROOT, env=env)
            started = template.grade(options, cwd=ROOT, env=env, log_path=log)
        if started is None:  # a new one that could not start a grade: the usual start says why
            template.close()
            self.untemplated.add(key)
            return None
        self.templates[key] = template
        while len(self.templates) > TEMPLATES_KEPT:
            self.templates.pop(next(iter(self.templates))).close()
        return started

    def close(self) -> None:
        super().close()
        while self.templates:
            self.templates.popitem()[1].close()

    def start(self, args: list[str], log: Path, *, close: tuple[int, ...] = ()) -> Started:
        self.prepare()
        if not self.fork_is_safe():
            return super().start(args, log, close=close)

        def child() -> int:
            import pytest

            return int(pytest.main(args))

        return start_forked(child, cwd=ROOT, env=kata_env(self.threads, self.env), log_path=log, close=close)


SHARDS_MAX = 4  # judging processes for one kata's grade, at most: past that, their start-up costs more than it saves


def default_shards(katas: int = 1, workers: int | None = None) -> int:
    """Shards for each of `katas` grades run `workers` at a time (default: one per core): the
    cores left over, so a single kata's verdict (make check, make watch) uses them all."""
    workers = workers or os.cpu_count() or 1
    return max(1, min(SHARDS_MAX, workers // max(1, katas)))


def make_engine(kind: str = "auto", **options) -> ProcessEngine:
    """ "fork" where the platform allows it (Linux), else "process"; KATAS_ENGINE overrides."""
    kind = os.environ.get("KATAS_ENGINE") or kind
    if kind == "process" or not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return ProcessEngine(**options)
    return ForkEngine(**options)

"""Grading many katas: several workers, each feeding a warm fork server.

A fork server is `grader.py _serve`: a process that imports torch once and grades (or
times) each job it reads on stdin in a forked child (engines.ForkEngine), answering one
JSON line per job. A server that dies, or stops answering, during a job takes that job
with it: the job is graded a crash (its kata may well have killed the server; grading it
again in a process of the grader's own would let it kill the grader) and the worker starts
a new server for the rest (or grades them in fresh processes, engines.ProcessEngine, as
`--engine process` does throughout, if none starts). Before any job runs, every kata file
is copied aside, so a kata that deletes or rewrites another file cannot change that one's
grade.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from judge.engines import ForkEngine, ProcessEngine, kata_env, private_copy, shown_as
from judge.language import tr
from judge.limits import Limits, limits_for
from judge.paths import ROOT
from judge.protocol import KataResult, Status


def default_workers() -> int:
    """Katas graded at once: one per core."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Job:
    """A kata file to grade as kata `name`; `first_failure`: stop at its first failed test.
    `seed`, `limits` and `env`, where given, replace grade_all's for this job alone, so jobs of
    several kinds (the test suite's batches) share the same workers and fork servers. Not
    KATAS_LANG: a fork server's test modules picked their texts when it imported them."""

    name: str
    path: Path
    first_failure: bool = False
    seed: int | None = None
    limits: Limits | None = None
    env: dict | None = field(default=None, hash=False)


class ServerGone(Exception):
    """The fork server died or stopped answering."""


@dataclass
class Spare:
    """Where grade_all leaves one of its fork servers running, warm, for what comes next (the
    timing): a worker that runs out of jobs hands its server over, instead of closing it, if
    none was handed over yet. Whoever asked for it closes it."""

    server: Server | None = None


class Server:
    """The grader's end of one fork server. The server makes its grades' folders in one of
    this end's (its TMPDIR), which close removes: a kata that kills the server leaves none."""

    def __init__(self, *, device: str, limits: Limits, threads: int | None, env: dict | None = None, shards: int = 1):
        self.limits = limits
        command = [sys.executable, str(ROOT / "grader.py"), "_serve", "--device", device, "--shards", str(shards)]
        command += ["--time-limit", str(limits.time_limit), "--test-timeout", str(limits.test_timeout)]
        self.scratch = tempfile.mkdtemp(prefix="kata-server-")
        try:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=kata_env(threads, env) | {"TMPDIR": self.scratch},
            )
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self.buffer = b""

    def ask(self, request: dict, timeout: float) -> dict:
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except OSError as error:
            raise ServerGone(str(error)) from None
        return json.loads(self._line(timeout))

    def _line(self, timeout: float) -> bytes:
        """One line from the server within `timeout` s (its own limits end each job sooner)."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ServerGone(tr("no answer in time"))
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ServerGone(tr("it exited"))
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def grade(self, job: Job, seed: int) -> KataResult:
        """The job's verdict, under its own seed, limits and environment where it has them."""
        request = {
            "op": "grade",
            "name": job.name,
            "path": str(job.path),
            "seed": seed if job.seed is None else job.seed,
            "first_failure": job.first_failure,
            "limits": asdict(job.limits or self.limits),
            "env": job.env or {},
        }
        answer = self.ask(request, limits_for(job.name, job.limits or self.limits).time_limit + 30)
        return KataResult.from_json(answer)

    def time(self, result: KataResult, path: Path) -> None:
        answer = self.ask({"op": "time", "name": result.name, "path": str(path)}, self.limits.timing_limit() + 30)
        result.timing = answer["timing"]

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def serve(device: str, limits: Limits, requests, answers, *, shards: int = 1) -> None:
    """The server's loop (`grader.py _serve`): one JSON request a line in, one answer out."""
    engine = ForkEngine(device=device, limits=limits, shards=shards)
    engine.prepare()
    for line in requests:
        request = json.loads(line)
        # a job's own limits and variables (over the server's), for this request alone
        engine.limits = Limits(**request["limits"]) if "limits" in request else limits
        engine.env = request.get("env") or None
        if request["op"] == "grade":
            result = engine.grade(
                request["name"], Path(request["path"]), request["seed"], first_failure=request["first_failure"]
            )
            answer = result.to_json(internal=True)
        else:
            result = KataResult(request["name"], Status.PASS, 1.0, 0, 0, "")
            engine.time(result, Path(request["path"]))
            answer = {"timing": result.timing}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def grade_all(
    jobs: list[Job],
    *,
    seed: int,
    device: str,
    limits: Limits,
    workers: int,
    fork: bool,
    progress: Callable[[str, str], None] | None = None,
    on_result: Callable[[int, KataResult], None] | None = None,
    env: dict | None = None,
    shards: int = 1,
    spare: Spare | None = None,
    slots: contextlib.AbstractContextManager | None = None,
    servers: list[Server] | None = None,
) -> list[KataResult]:
    """Grade the jobs, `workers` at a time, results in the jobs' order, each grade's tests in
    `shards` judging processes (engines.default_shards). progress(event, name) is told "start"
    and "done" for each kata, and on_result(index, result) each verdict as soon as it is known,
    from the worker threads (one at a time). `env`: variables set for the grades (the test
    suite's switches), over this process's. `spare`: gets a fork server left running (Spare).
    `slots`: each grade, with the start of the fork server it needs, holds one while it runs,
    so callers that share them across several grade_all calls bound how many run at once.
    `servers`: fork servers started already (for this call's device, limits, threads, env and
    shards), which workers take before they start their own; those left are the caller's."""
    # ignore_cleanup_errors: a caller that exits mid-grade (pytest -x with the suite's pool)
    # leaves the servers writing there; the folder is theirs to finish, not an error
    language = kata_env(None, env).get("KATAS_LANG")
    if any((job.env or {}).get("KATAS_LANG", language) != language for job in jobs):
        raise ValueError("a job's own env cannot change KATAS_LANG: grade it in a grade_all of its language")
    with tempfile.TemporaryDirectory(prefix="katas-snapshot-", ignore_cleanup_errors=True) as snapshot:
        copies = [_snapshot(job, Path(snapshot) / str(index)) for index, job in enumerate(jobs)]

        def shown(index: int, result: KataResult) -> KataResult:
            return shown_as(result, copies[index].path, jobs[index].path)

        results = _grade_copies(
            copies,
            seed=seed,
            device=device,
            limits=limits,
            workers=workers,
            fork=fork,
            progress=progress,
            on_result=None if on_result is None else (lambda index, result: on_result(index, shown(index, result))),
            env=env,
            shards=shards,
            spare=spare,
            slots=slots,
            servers=servers,
        )
    return [shown(index, result) for index, result in enumerate(results)]


def _snapshot(job: Job, folder: Path) -> Job:
    """The job on a private copy of its file (the same name, in a folder of its own)."""
    return replace(job, path=private_copy(job.path, folder))


def server_died(job: Job, reason: str) -> KataResult:
    return KataResult(
        job.name,
        Status.CRASH,
        0.0,
        0,
        0,
        tr(
            "the process grading it died ({reason}): a kata must not signal other processes; "
            "the other katas were graded by a new one",
            reason=reason,
        ),
    )


def _grade_copies(
    jobs: list[Job],
    *,
    seed: int,
    device: str,
    limits: Limits,
    workers: int,
    fork: bool,
    progress: Callable[[str, str], None] | None,
    on_result: Callable[[int, KataResult], None] | None = None,
    env: dict | None = None,
    shards: int = 1,
    spare: Spare | None = None,
    slots: contextlib.AbstractContextManager | None = None,
    servers: list[Server] | None = None,
) -> list[KataResult]:
    if not jobs:
        return []
    workers = min(workers, len(jobs))  # each worker starts a fork server: none beyond the jobs
    tell = _serialised(progress)
    lock_results = threading.Lock()
    threads = threads_each(workers)
    pending = list(enumerate(jobs))
    kinds = [_template_key(job) for job in jobs]  # by job index
    results: dict[int, KataResult] = {}
    lock = threading.Lock()

    grading: dict[int, tuple] = {}  # worker -> the template key of the job it took last

    def next_job(worker: int):
        """Another job like the worker's last one (its fork server keeps a template of that kata:
        judge.templates), else the first of a kind no other worker grades, else the first."""
        with lock:
            if not pending:
                return None
            others = {key for other, key in grading.items() if other != worker}
            keys = [kinds[index] for index, _ in pending]
            mine = grading.get(worker)
            place = next((n for n, key in enumerate(keys) if key == mine), None)
            if place is None:
                place = next((n for n, key in enumerate(keys) if key not in others), 0)
            grading[worker] = keys[place]
            return pending.pop(place)

    def first_server() -> Server | None:
        with lock:
            if servers:
                return servers.pop(0)
        return _start(device, limits, threads, env, shards)

    def work(worker: int) -> None:
        server = None
        started = not fork  # the fork server starts with the first grade, in its slot
        fresh = ProcessEngine(device=device, limits=limits, threads=threads, env=env, shards=shards)

        def grade_one(job: Job) -> KataResult:
            nonlocal server, started
            if not started:
                server, started = first_server(), True
            if server is not None:
                try:
                    return server.grade(job, seed)
                except ServerGone as gone:
                    server.close()
                    server = _start(device, limits, threads, env, shards)
                    return server_died(job, str(gone))
                except (ValueError, KeyError, TypeError):  # an answer out of protocol: grade afresh
                    server.close()
                    server = None
            engine = fresh
            if job.limits is not None or job.env is not None:  # the job's own settings, over the call's
                own = {"limits": job.limits or limits, "env": (env or {}) | (job.env or {})}
                engine = ProcessEngine(device=device, threads=threads, shards=shards, **own)
            seed_used = seed if job.seed is None else job.seed
            return engine.grade(job.name, job.path, seed_used, first_failure=job.first_failure)

        try:
            while (item := next_job(worker)) is not None:
                index, job = item
                tell("start", job.name)
                with slots or contextlib.nullcontext():
                    results[index] = grade_one(job)
                tell("done", job.name)
                if on_result is not None:
                    with lock_results:
                        on_result(index, results[index])
        finally:
            with lock:
                if spare is not None and spare.server is None and server is not None:
                    spare.server, server = server, None
            if server is not None:
                server.close()

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(work, worker) for worker in range(max(1, workers))]:
            future.result()
    return [results[index] for index in range(len(jobs))]


def threads_each(workers: int) -> int | None:
    """CPU threads each grade gets when `workers` grade at once: one (parallel processes, no
    oversubscription), or torch's own default for a grade alone."""
    return 1 if workers > 1 else None


def _template_key(job: Job) -> tuple:
    """What a fork server's template of a job's grade depends on: its kata and its variables."""
    return job.name, tuple(sorted((job.env or {}).items()))


def time_all(
    results: list[KataResult],
    paths: dict[str, Path],
    *,
    device: str,
    limits: Limits,
    fork: bool,
    progress: Callable[[str, str], None] | None = None,
    on_timed: Callable[[KataResult], None] | None = None,
    server: Server | None = None,
) -> None:
    """Time each passing kata against its reference, one at a time, each in a process of its own,
    by `server` (a warm fork server: the one grade_all left as its Spare) or a new one.
    progress(event, name) is told "timing" as each one starts, on_timed(result) as it ends."""
    server = server or (_start(device, limits, None) if fork else None)
    fresh = ProcessEngine(device=device, limits=limits)
    try:
        for result in results:
            if result.status != Status.PASS:
                continue
            if progress is not None:
                progress("timing", result.name)
            try:
                if server is None:
                    raise ServerGone(tr("no fork server"))
                server.time(result, paths[result.name])
            except (ServerGone, ValueError, KeyError, TypeError):
                if server is not None:
                    server.close()
                server = None
                fresh.time(result, paths[result.name])
            if on_timed is not None:
                on_timed(result)
    finally:
        if server is not None:
            server.close()


def _serialised(progress: Callable[[str, str], None] | None) -> Callable[[str, str], None]:
    lock = threading.Lock()

    def tell(event: str, name: str) -> None:
        if progress is not None:
            with lock:
                progress(event, name)

    return tell


def _start(device: str, limits: Limits, threads: int | None, env: dict | None = None, shards: int = 1) -> Server | None:
    try:
        return Server(device=device, limits=limits, threads=threads, env=env, shards=shards)
    except OSError:
        return None

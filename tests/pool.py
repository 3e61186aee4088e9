"""Every grade the maintainers' suite needs, graded in the background on the grader's own workers.

A test module whose tests read verdicts (mutants, variants, stubs, broken files) declares
`grading_plan(items, config) -> list[Batch]`: the jobs its selected tests need. When
collection ends, tests/conftest.py gathers the batches of every such module, moves their
tests after all the others, and starts grading the batches in a thread, their jobs in one
queue on both cores (judge.scheduling.grade_all); meanwhile this process runs the other tests
(the kata tests against the solutions, the grader's and the practice loop's). A test reads
its verdict with `verdict(batch, key)`, which waits for its batch.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field, replace

from judge.limits import Limits
from judge.protocol import KataResult
from judge.scheduling import Job, Server, default_workers, grade_all, threads_each

# The fork-server lanes a whole run grades, by language: test_test_strength's in Chinese,
# test_broken_katas's in the run's own (None). Each one's first fork server starts while pytest
# collects (Pool.warm_up): its 3 CPU-s of imports on the core that collection leaves idle.
WARM_LANES = ("zh", None)


class Slots:
    """How many grades run at once, all lanes together (grade_all's `slots`: each grade holds one
    while it runs); the number may change while they run, and a lower one takes effect as
    grades end."""

    def __init__(self, count: int):
        self.count, self.busy = count, 0
        self.changed = threading.Condition()

    def __enter__(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.busy < self.count)
            self.busy += 1

    def __exit__(self, *raised) -> None:
        with self.changed:
            self.busy -= 1
            self.changed.notify_all()

    def add(self, count: int) -> None:
        with self.changed:
            self.count += count
            self.changed.notify_all()


@dataclass
class Batch:
    """Jobs graded together: under the same limits, engine, seed and environment."""

    name: str
    jobs: dict[str, Job]  # key -> job
    limits: Limits
    seed: int
    fork: bool = True
    env: dict = field(default_factory=dict)


class Pool:
    def __init__(self):
        self.batches: dict[str, Batch] = {}
        self.results: dict[str, dict[str, KataResult]] = {}
        self.ready: dict[str, threading.Event] = {}
        self.failed: dict[str, BaseException] = {}
        # How many grades run at once, all lanes together: a core each, less the one this
        # process's own tests use until they are done and it waits for verdicts (widen).
        self.slots = Slots(max(1, default_workers() - 1))
        self.widened = False
        self.lock = threading.Lock()
        # language -> (its lane's variables, its grades' threads, a server started for them)
        self.warm: dict[str | None, tuple[dict, int | None, Server]] = {}

    def add(self, batch: Batch) -> None:
        self.batches[batch.name] = batch
        self.ready[batch.name] = threading.Event()

    def warm_up(self) -> None:
        """Start the first fork server of each of WARM_LANES now, in the environment its lane will
        have (start: this one's, the language over it), so that it imports while pytest collects.
        A lane takes it if its environment is still that one; start closes those no lane takes."""
        threads = threads_each(default_workers())  # a lane of more jobs than workers
        for language in WARM_LANES:
            environment = dict(os.environ) | ({"KATAS_LANG": language} if language else {})
            with contextlib.suppress(OSError):
                server = Server(device="cpu", limits=Limits(), threads=threads, env=environment)
                self.warm[language] = (environment, threads, server)

    def _warm_server(self, language: str | None, environment: dict, jobs: int) -> list[Server]:
        """The lane's warm server, if it was started for this very lane: the same variables, and
        the threads grade_all gives its grades (threads_each of its workers, no more than jobs)."""
        with self.lock:
            found = self.warm.pop(language, None)
        if found is None:
            return []
        started_for, threads, server = found
        if (started_for, threads) != (environment, threads_each(min(default_workers(), jobs))):
            server.close()
            return []
        return [server]

    def close_warm(self) -> None:
        """Close the warm servers no lane took (from the pool's thread, or at the session's end)."""
        with self.lock:
            left, self.warm = list(self.warm.values()), {}
        for *_, server in left:
            server.close()

    def start(self) -> None:
        """Grade every batch in the background: the batches' jobs as queues on both cores, each job
        under its batch's seed, limits and variables, so the batches share warm fork servers
        (_grade); the batches with short limits first (their files mostly wait for a limit,
        while the others use the cores), then the most jobs first. In the environment as it is
        now: a test that sets a variable for itself meanwhile (say KATAS_LANG=zh, by
        monkeypatch) must not reach the grades that start while it runs."""
        order = sorted(self.batches.values(), key=lambda b: (not b.fork, b.limits.test_timeout >= 10, -len(b.jobs)))
        now = dict(os.environ)
        threading.Thread(target=self._grade, args=(order, now), name="kata-pool", daemon=True).start()

    def _grade(self, order: list[Batch], environment: dict) -> None:
        """One grade_all a lane, the lanes at once: the batches graded alike (by fork servers, or
        in fresh processes) in the same language. A fork server's test modules picked their
        texts in its language when it imported them, so a batch in another language needs
        servers of its own. At once, so that one lane's waits (a file that sleeps to its limit,
        a fresh process importing torch, the last grades of a lane) leave no core idle: the
        limits count CPU time, or wall-clock time less the waits for a CPU, so a busy machine
        fails no grade. Each lane gets a worker a core (a fork lane's second fork server starts
        with its second worker's first grade), and all of them share the pool's slots: a core
        each, less the one this process's own tests use until they are done (widen). So the
        lane that ends last still grades on every core (with one worker for all but the largest
        lane, the last 30 s of a suite left a core idle). Every process more than the cores
        costs CPU (measured on 2 cores, the whole suite: with 7 workers in all and no slots, the
        grades took 29% more CPU time beside this process's tests than alone)."""
        lanes: dict[tuple, list[Batch]] = {}
        for batch in order:
            lanes.setdefault((batch.fork, batch.env.get("KATAS_LANG")), []).append(batch)
        threads = []
        for (fork, language), batches in lanes.items():
            lane_environment = environment | ({"KATAS_LANG": language} if language else {})
            jobs = sum(len(batch.jobs) for batch in batches)
            servers = self._warm_server(language, lane_environment, jobs) if fork else []
            threads.append(
                threading.Thread(
                    target=self._grade_lane,
                    args=(batches, fork, lane_environment),
                    kwargs={"workers": default_workers(), "servers": servers},
                    name=f"kata-pool-{'fork' if fork else 'fresh'}-{language or 'default'}",
                    daemon=True,
                )
            )
        self.close_warm()  # those of lanes no batch uses
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _grade_lane(
        self, batches: list[Batch], fork: bool, environment: dict, *, workers: int, servers: list[Server]
    ) -> None:
        """The batches' jobs in one grade_all (by the `servers` started already, first); each
        batch is ready as soon as its last job is."""
        queue = [(batch, key) for batch in batches for key in batch.jobs]
        for batch in batches:
            self.results[batch.name] = {}
            if not batch.jobs:
                self.ready[batch.name].set()

        def done(index: int, result: KataResult) -> None:
            batch, key = queue[index]
            self.results[batch.name][key] = result
            if len(self.results[batch.name]) == len(batch.jobs):
                self.ready[batch.name].set()

        try:
            grade_all(
                [replace(batch.jobs[key], seed=batch.seed, limits=batch.limits, env=batch.env) for batch, key in queue],
                seed=0,  # each job carries its batch's
                device="cpu",
                limits=Limits(),
                workers=workers,
                fork=fork,
                on_result=done,
                env=environment,
                slots=self.slots,
                servers=servers,
            )
        except BaseException as error:  # noqa: BLE001 - the tests that read it report it
            for batch in batches:
                if not self.ready[batch.name].is_set():
                    self.failed[batch.name] = error
                    self.ready[batch.name].set()
        finally:
            for server in servers:  # one no worker took
                server.close()

    def widen(self) -> None:
        """This process's own tests are done: its core grades too."""
        with self.lock:
            if not self.widened:
                self.widened = True
                self.slots.add(1)

    @contextlib.contextmanager
    def lent(self):
        """Within: this process's test mostly waits (a timer, a deadlock called after seconds of
        idle ranks), so its core grades too."""
        with self.lock:
            lend = not self.widened
        if lend:
            self.slots.add(1)
        try:
            yield
        finally:
            if lend:
                self.slots.add(-1)

    def verdict(self, batch: str, key: str) -> KataResult:
        self.widen()
        self.ready[batch].wait()
        if batch in self.failed:
            raise RuntimeError(f"grading the batch {batch!r} failed: {self.failed[batch]!r}")
        return self.results[batch][key]


POOL = Pool()


def verdict(batch: str, key: str) -> KataResult:
    return POOL.verdict(batch, key)

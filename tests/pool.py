"""Every grade the maintainers' suite needs, graded in the background on the grader's own workers.

A test module whose tests read verdicts (mutants, variants, stubs, broken files) declares
`grading_plan(items, config) -> list[Batch]`: the jobs its selected tests need. When
collection ends, tests/conftest.py gathers the batches of every such module, moves their
tests after all the others, and starts grading the batches one after another in a thread,
each on both cores (judge.scheduling.grade_all); meanwhile this process runs the other tests
(the kata tests against the solutions, the grader's and the practice loop's). A test reads
its verdict with `verdict(batch, key)`, which waits for its batch.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from judge.limits import Limits
from judge.protocol import KataResult
from judge.scheduling import Job, default_workers, grade_all


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

    def add(self, batch: Batch) -> None:
        self.batches[batch.name] = batch
        self.ready[batch.name] = threading.Event()

    def start(self) -> None:
        """Grade every batch in a thread: the ones with the most jobs first, fresh processes last.
        In the environment as it is now: a test that sets a variable for itself meanwhile (say
        KATAS_LANG=zh, by monkeypatch) must not reach the grades that start while it runs."""
        order = sorted(self.batches.values(), key=lambda b: (not b.fork, -len(b.jobs)))
        now = dict(os.environ)
        threading.Thread(target=self._grade, args=(order, now), name="kata-pool", daemon=True).start()

    def _grade(self, order: list[Batch], environment: dict) -> None:
        for batch in order:
            try:
                keys = list(batch.jobs)
                graded = grade_all(
                    [batch.jobs[key] for key in keys],
                    seed=batch.seed,
                    device="cpu",
                    limits=batch.limits,
                    workers=default_workers(),
                    fork=batch.fork,
                    env=environment | batch.env,
                )
                self.results[batch.name] = dict(zip(keys, graded))
            except BaseException as error:  # noqa: BLE001 - the tests that read it report it
                self.failed[batch.name] = error
            finally:
                self.ready[batch.name].set()

    def verdict(self, batch: str, key: str) -> KataResult:
        self.ready[batch].wait()
        if batch in self.failed:
            raise RuntimeError(f"grading the batch {batch!r} failed: {self.failed[batch]!r}")
        return self.results[batch][key]


POOL = Pool()


def verdict(batch: str, key: str) -> KataResult:
    return POOL.verdict(batch, key)

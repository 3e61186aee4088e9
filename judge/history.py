"""The practice history: append-only JSON lines in .katas/history.jsonl.

Each record is one write(2) of one line to a file opened with O_APPEND, then fsync:
concurrent writers do not interleave, and an interrupted write can only leave a torn last
line, which readers skip (and the next append starts on a line of its own)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from judge.places import Places, fingerprint
from judge.protocol import KataResult


class History:
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

    def append_grade(self, result: KataResult, **fields) -> None:
        """A verdict on the learner's code; a failure of the grader or the environment is none."""
        if not result.internal_error:
            self.append(grade_record(result, **fields))

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


def history_of(places: Places) -> History:
    return History(places.history_file)


def grade_record(result: KataResult, *, source: str, seed: int, sha: str | None, now: float, **extra) -> dict:
    record = {
        "ts": now,
        "event": "grade",
        "source": source,
        "kata": result.name,
        "status": str(result.status),
        "score": round(result.score, 4),
        "passed": result.passed,
        "total": result.total,
        "seed": seed,
    }
    if sha:
        record["sha"] = sha
    record.update(extra)
    return record


def record_check(
    results: list[KataResult], impl_dir: Path, seed: int, source: str = "check", places: Places | None = None
) -> None:
    """Record `make check`/`make grade` verdicts of the learner's own katas/ in the history
    (results of other folders, such as solutions/, are not the learner's)."""
    places = places or Places.default()
    if Path(impl_dir).resolve() != places.katas:
        return
    log, now = history_of(places), time.time()
    for result in results:
        try:
            sha = fingerprint(places.kata_file(result.name).read_bytes())
        except OSError:
            sha = None
        log.append_grade(result, source=source, seed=seed, sha=sha, now=now)

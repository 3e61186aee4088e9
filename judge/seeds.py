"""Verdicts stable across seeds (maintainers): `python -m judge.seeds [KATA ...] [--seeds 20]`.

Grades, under each of N seeds, a kata's solution and every variant in full (each must pass,
with no diagnosis) and every mutant up to its first failure (each must get its expected
verdict, its failure diagnosed as its own slip, first rejected by its declared tier). Prints
one line per file whose verdict differs from what it must be on some seed, naming the seed
to replay (`make check KATA=... SEED=...` or `grader.py --seed`), then a summary; exits 1
if any did. The hidden shapes are drawn from the seed; the named edge cases run every time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from judge.catalog import kata_aliases, kata_names, load_catalog, resolve_kata
from judge.errors import UsageError
from judge.limits import Limits
from judge.mutants import Mutant, MutantError, load_mutants
from judge.paths import SOLUTIONS, VARIANTS
from judge.protocol import KataResult
from judge.scheduling import Job, default_workers, grade_all


@dataclass(frozen=True)
class Subject:
    """A file graded under every seed, and what its verdict must be."""

    kata: str
    label: str  # "solution", "variant hf_llama", "mutant scale_missing"
    path: Path
    mutant: Mutant | None = None  # None: a correct file


def subjects(kata: str, folder: Path) -> Iterator[Subject]:
    yield Subject(kata, "solution", SOLUTIONS / f"{kata}.py")
    for variant in sorted((VARIANTS / kata).glob("*.py")):
        yield Subject(kata, f"variant {variant.stem}", variant)
    for mutant in load_mutants(kata):
        path = folder / f"{kata}-{mutant.name}.py"
        try:
            path.write_text(mutant.source(), encoding="utf-8")
        except MutantError:
            continue  # a stale patch: `make test` names it
        yield Subject(kata, f"mutant {mutant.name}", path, mutant)


def wrong(subject: Subject, verdict: KataResult) -> str | None:
    """What is wrong with this verdict, or None when it is what the file must get."""
    mutant = subject.mutant
    if mutant is None:
        if verdict.status != "pass":
            return f"graded {verdict.status}: {verdict.message}"
        return f"passed with a diagnosis: {verdict.diagnosis}" if verdict.diagnosis else None
    if verdict.status != mutant.expect:
        return f"graded {verdict.status}, not {mutant.expect}: {verdict.message}"
    if verdict.status != "fail":
        return None
    if not any(mutant.why in line for line in verdict.diagnosis):
        return f"not diagnosed as its own slip: {verdict.diagnosis or 'no diagnosis'}"
    first_tier = verdict.failures[0].get("tier") if verdict.failures else None
    if mutant.tier is not None and first_tier != mutant.tier:
        return f"first rejected by a {first_tier} test, not a {mutant.tier} one: {verdict.message}"
    return None


def check(katas: list[str], seeds: list[int], workers: int, report) -> int:
    """Grade every subject of `katas` under every seed; report(line) each wrong verdict. The
    number of wrong (subject, seed) pairs."""
    limits = Limits(time_limit=120, test_timeout=60)
    wrong_count = 0
    with tempfile.TemporaryDirectory(prefix="katas-seeds-") as folder:
        found = [s for kata in katas for s in subjects(kata, Path(folder))]
        jobs = [Job(s.kata, s.path, first_failure=s.mutant is not None) for s in found]
        for seed in seeds:
            start, before = time.monotonic(), wrong_count
            for subject, verdict in zip(
                found, grade_all(jobs, seed=seed, device="cpu", limits=limits, workers=workers, fork=True)
            ):
                problem = wrong(subject, verdict)
                if problem:
                    wrong_count += 1
                    report(f"{subject.kata}: {subject.label}, seed {seed}: {problem[:400]}")
            report(f"seed {seed}: {len(found)} files, {wrong_count - before} wrong ({time.monotonic() - start:.0f} s)")
        report(
            f"{len(found)} files of {len(katas)} katas, {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}): {wrong_count} wrong verdicts"
        )
    return wrong_count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m judge.seeds", description=__doc__.split("\n\n")[0])
    parser.add_argument("katas", nargs="*", help="katas to check (default: every kata)")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--workers", type=int, default=default_workers())
    options = parser.parse_args(argv)
    catalog = load_catalog()
    names, aliases = kata_names(catalog), kata_aliases(catalog)
    try:
        katas = [resolve_kata(name, names, aliases) for name in options.katas] or names
    except UsageError as error:
        parser.error(str(error))
    if options.seeds < 1:
        parser.error("--seeds must be at least 1")
    seeds = list(range(options.first, options.first + options.seeds))
    return 1 if check(katas, seeds, options.workers, lambda line: print(line, flush=True)) else 0


if __name__ == "__main__":
    sys.exit(main())

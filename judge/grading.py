"""The grader's commands (grader.py is their entry point).

    grader.py [--impl katas|solutions|DIR|FILE] [--kata NAME]... [--device cpu|cuda|auto]
              [--no-timing] [--json FILE] [--seed N] [--jobs N] [--time-limit S]
              [--test-timeout S] [--engine auto|fork|process]
    grader.py stubs [--write]     (maintainers: katas/ generated from solutions/)
    grader.py table               (the README's kata table, from info.toml)
    grader.py costs               (maintainers: each kata test's cost, tests/costs.json)
    grader.py _serve ...          (internal: a warm fork server, see judge.scheduling)

Exit status: 0 when every graded kata passes, 1 otherwise, 2 when the grader could not run.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

from judge.advice import next_step, replay_line, via_make
from judge.catalog import Kata, kata_aliases, kata_names, kata_not_named, kata_table, load_catalog, resolve_kata
from judge.costs import COSTS, measured
from judge.engines import default_shards
from judge.environment import require_grading_dependencies
from judge.errors import UsageError, usage_error
from judge.history import record_check
from judge.language import tr
from judge.learning import load_paths
from judge.limits import DEFAULT, Limits
from judge.paths import KATAS, ROOT, test_file
from judge.protocol import KataResult
from judge.reporting import head, row, timing_head, timing_row, verdict_end, width_of, write_json
from judge.scheduling import Job, Spare, default_workers, grade_all, serve, time_all
from judge.status_line import StatusLine
from judge.stubs import StubError, refresh_stubs


class KataArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise usage_error(message, f"python {self.prog}")  # a subcommand's own --help: "grader.py costs"


def parse_grade_args(argv: list[str], catalog: list[Kata]) -> argparse.Namespace:
    names = kata_names(catalog)
    parser = KataArgumentParser(
        prog="grader.py",
        description="Grade the katas against PyTorch.",
        epilog="Other commands: python grader.py stubs [--write] | table | costs",
    )
    parser.add_argument(
        "--impl",
        default="katas",
        help="what to grade: a folder of files named like the katas (katas, the default; solutions; any folder), "
        "or one kata file",
    )
    parser.add_argument(
        "--kata", action="append", metavar="NAME", help=f"grade only this kata (repeatable): {', '.join(names)}"
    )
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: CPU, and CUDA too when available"
    )
    parser.add_argument("--no-timing", action="store_true", help="skip timing passing katas against PyTorch")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    parser.add_argument("--seed", type=int, help="replay the hidden shapes of an earlier run")
    parser.add_argument("--jobs", type=int, default=default_workers(), help="katas graded at once")
    parser.add_argument(
        "--time-limit", type=float, default=DEFAULT.time_limit, help="wall-clock seconds allowed per kata"
    )
    parser.add_argument("--test-timeout", type=float, default=DEFAULT.test_timeout, help="seconds allowed per test")
    parser.add_argument(
        "--engine",
        choices=("auto", "fork", "process"),
        default="auto",
        help="fork: children of a warm process (auto on Linux, ~5x faster); process: a fresh one each",
    )
    args = parser.parse_args(argv)
    aliases = kata_aliases(catalog)
    if args.kata is not None and not all(name.strip() for name in args.kata):
        example = "make check KATA=causal_mask" if via_make() else "python grader.py --kata causal_mask"
        raise kata_not_named(names, example)
    args.kata = [resolve_kata(name, names, aliases) for name in args.kata] if args.kata else None
    if args.jobs < 1 or args.time_limit <= 0 or args.test_timeout <= 0:
        raise UsageError(tr("--jobs, --time-limit and --test-timeout must be positive"))
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(tr("--json {path}: no such folder for the report", path=args.json))
    args.impl_dir, args.names = resolve_impl(args.impl, args.kata, names)
    return args


def resolve_impl(impl: str, chosen: list[str] | None, names: list[str]) -> tuple[Path, list[str]]:
    """(the folder of kata files, the katas to grade) for --impl: a folder, or one file named like a kata."""
    path = Path(impl) if Path(impl).is_absolute() else Path.cwd() / impl
    if not path.exists() and (ROOT / impl).exists():
        path = ROOT / impl
    if path.is_file():
        if path.suffix != ".py" or path.stem not in names:
            raise UsageError(
                tr("--impl {impl}: a single file must be named like a kata (e.g. causal_mask.py)", impl=impl)
            )
        if chosen and chosen != [path.stem]:
            raise UsageError(
                tr(
                    "--impl {impl} is the {kata} kata; --kata asks for {chosen}",
                    impl=impl,
                    kata=path.stem,
                    chosen=", ".join(chosen),
                )
            )
        return path.parent, [path.stem]
    if not path.is_dir():
        raise UsageError(tr("--impl {impl}: no such folder or kata file", impl=impl))
    return path, chosen or names


def cuda_available() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, torch; sys.exit(not torch.cuda.is_available())"], capture_output=True
    )
    return probe.returncode == 0


def use_fork(engine: str) -> bool:
    return engine == "fork" or (engine == "auto" and sys.platform == "linux" and hasattr(os, "fork"))


def grade_command(argv: list[str]) -> int:
    catalog = load_catalog()
    args = parse_grade_args(argv, catalog)
    require_grading_dependencies()
    if args.device == "cuda" and not cuda_available():
        raise UsageError(tr("--device cuda: torch sees no CUDA device here (try --device cpu)"))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    limits = Limits(time_limit=args.time_limit, test_timeout=args.test_timeout)
    paths = {name: args.impl_dir / f"{name}.py" for name in args.names}
    fork = use_fork(args.engine)
    jobs = [Job(name, path) for name, path in paths.items()]
    shown = os.path.relpath(args.impl_dir, Path.cwd())
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    width = width_of(list(paths))
    # the timing runs on a fork server the grades leave warm (no second import of torch)
    timer = None if args.no_timing else Spare()
    status = StatusLine(sys.stderr, len(jobs), enabled=sys.stderr.isatty())
    rows = Rows(status, lambda result: row(result, width=width, colour=colour))
    status.above("\n".join(head(impl=shown, seed=seed, width=width)))
    try:
        results = grade_all(
            jobs,
            seed=seed,
            device=args.device,
            limits=limits,
            workers=args.jobs,
            fork=fork,
            progress=status,
            on_result=rows,
            shards=default_shards(len(jobs), args.jobs),
            spare=timer,
        )
        advice = (
            replay_line(results, seed, single=len(results) == 1),
            next_step(results, own_katas=args.impl_dir.resolve() == KATAS.resolve()),
        )
        status.above("\n".join(verdict_end(results, advice)))  # the verdicts first: timing takes seconds
        if args.json:  # first, so a reader gets the verdicts whatever happens next (rewritten with the timing)
            write_json(args.json, results, seed)
        if timer is not None and any(r.status == "pass" for r in results):
            status.above(timing_head())
            try:
                time_all(
                    results,
                    paths,
                    device=args.device,
                    limits=limits,
                    fork=fork,
                    progress=status,
                    on_timed=lambda result: status.above(timing_row(result, width=width)),
                    server=timer.server,
                )
            except OSError as error:  # timing is extra: the verdicts stand without it
                status.above(tr("timing failed: {error}", error=error))
            timer = None  # time_all closed its server
    finally:
        status.clear()
        if timer is not None and timer.server is not None:
            timer.server.close()
    if args.json:
        write_json(args.json, results, seed)
    try:  # a convenience: it never fails a grade
        record_check(results, args.impl_dir, seed, source="check" if args.kata else "grade")
    except OSError as error:
        print(tr("grader.py: note: the practice history was not updated ({error})", error=error), file=sys.stderr)
    if any(r.internal_error for r in results):
        return 2
    return 0 if all(r.status == "pass" for r in results) else 1


class Rows:
    """Prints each kata's row as soon as its verdict is known, in the katas' order."""

    def __init__(self, status: StatusLine, render):
        self.status, self.render = status, render
        self.ready: dict[int, KataResult] = {}
        self.next = 0

    def __call__(self, index: int, result: KataResult) -> None:
        self.ready[index] = result
        while self.next in self.ready:
            self.status.above(self.render(self.ready.pop(self.next)))
            self.next += 1


def stubs_command(argv: list[str]) -> int:
    parser = KataArgumentParser(
        prog="grader.py stubs",
        description="Compare (or --write) katas/ with the stubs generated from solutions/. "
        "--write never replaces a stub you have edited.",
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    try:
        written, stale = refresh_stubs(kata_names(load_catalog()), write=args.write)
    except StubError as error:
        raise UsageError(str(error)) from None
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(
            f"{path.relative_to(ROOT)} differs from the stub generated from solutions/"
            + (" (edited: left alone)" if args.write else "")
        )
    return 1 if stale else 0


def table_command(argv: list[str]) -> int:
    parser = KataArgumentParser(prog="grader.py table", description="Print the README's kata table.")
    parser.add_argument("--lang", choices=("en", "zh"), default="en", help="zh: README.zh-CN.md's, in Chinese")
    args = parser.parse_args(argv)
    catalog = load_catalog()
    print(kata_table(catalog, args.lang, load_paths(catalog)))
    return 0


def costs_command(argv: list[str]) -> int:
    """(maintainers) `grader.py costs`: measure each kata test on the solutions, in one pytest
    run on this machine (idle, for figures worth keeping), into tests/costs.json (judge.costs)."""
    KataArgumentParser(prog="grader.py costs", description=costs_command.__doc__).parse_args(argv)
    files = sorted({str(test_file(name).relative_to(ROOT)) for name in kata_names(load_catalog())})
    command = [sys.executable, "-m", "pytest", *files, "--impl", "solutions", "--device", "cpu"]
    run = subprocess.run([*command, "-q", "-p", "no:cacheprovider", "--store-costs", str(COSTS)], check=False, cwd=ROOT)
    if run.returncode != 0:
        print(f"the solutions' tests failed (exit {run.returncode}): {COSTS.relative_to(ROOT)} may be partial")
        return 1
    print(f"wrote {COSTS.relative_to(ROOT)}: {len(measured(COSTS))} tests")
    return 0


def serve_command(argv: list[str]) -> int:
    """(internal) `grader.py _serve`: a warm fork server, see judge.scheduling."""
    parser = argparse.ArgumentParser(prog="grader.py _serve")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-limit", type=float, default=DEFAULT.time_limit)
    parser.add_argument("--test-timeout", type=float, default=DEFAULT.test_timeout)
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    limits = Limits(time_limit=args.time_limit, test_timeout=args.test_timeout)
    serve(args.device, limits, sys.stdin, sys.stdout, shards=args.shards)
    return 0


COMMANDS = {"stubs": stubs_command, "table": table_command, "costs": costs_command, "_serve": serve_command}


def main(argv: list[str]) -> int:
    try:
        if argv and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        return grade_command(argv)
    except UsageError as error:
        print(tr("{command}: error: {message}", command="grader.py", message=error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(tr("grader.py: interrupted"), file=sys.stderr)
        return 2

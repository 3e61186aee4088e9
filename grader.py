#!/usr/bin/env python3
"""Grade the Transformer katas.

    python grader.py [--impl katas|solutions|DIR] [--kata NAME]... [--device cpu|cuda|auto]
                     [--no-timing] [--json FILE] [--seed N] [--jobs N] [--time-limit S]
    python grader.py stubs [--write]     (maintainers: katas/ generated from solutions/)

Each kata's tests run in a process of their own, in their own process group, under a
wall-clock limit, so one kata's hang or crash cannot stop the others. Outcomes come back
through a file the grader owns, never through the kata's output. Passing katas are then
timed against their PyTorch reference in one more process, one kata at a time.

Exit status: 0 when every graded kata passes, 1 otherwise, 2 when the grader could not run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
TESTS = ROOT / "tests"
CUDA_SKIP = "CUDA is not available"  # the only skip reason that is not counted against a kata
TAIL = 400  # characters of a dead process's output shown in its message


class UsageError(Exception):
    """Bad input to a command: reported on one line, exit status 2."""


@dataclass
class Kata:
    name: str
    title: str
    difficulty: int
    minutes: int
    reference: str
    hints: list[str] = field(default_factory=list)


def load_catalog() -> list[Kata]:
    with open(ROOT / "info.toml", "rb") as file:
        return [Kata(**entry) for entry in tomllib.load(file)["kata"]]


@dataclass
class KataResult:
    name: str
    status: str
    score: float  # fraction of the kata's tests that passed, 0..1
    passed: int
    total: int
    message: str
    failures: list[dict] = field(default_factory=list)
    timing: dict = field(default_factory=dict)
    internal_error: bool = False  # the grader, not the kata, is at fault


# --------------------------------------------------------------------------- running


def run_isolated(command: list[str], *, time_limit: float, log_path: Path, env: dict) -> tuple[int | None, bool]:
    """Run `command` in a new session; kill its whole process group after `time_limit` s.

    Returns (return code or None when killed, timed_out). Output goes to `log_path`, a
    file, so a flood of output can neither block the grader nor reach its table.
    """
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            returncode, timed_out = process.wait(timeout=time_limit), False
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
        finally:
            try:  # children the kata spawned die with it, whatever happened
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
    return returncode, timed_out


def default_jobs() -> int:
    """Processes graded at once: one per core."""
    return os.cpu_count() or 1


def kata_env(threads: int | None = None) -> dict:
    # No plugin autoloading: a user's own Python may carry plugins that reorder or skip tests.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def read_events(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill
                break
    return events


def log_tail(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            text = log.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-TAIL:]


def crash_details(log_path: Path, kata_path: Path) -> str:
    """What a dead process left behind: Python's fatal-error line and the kata line it was
    on (faulthandler prints both), else the last lines of its output."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")[-20000:]
    except OSError:
        return ""
    fatal = [line.strip() for line in text.splitlines() if line.startswith("Fatal Python error")]
    where = [
        f"{kata_path.name}, line {m.group(1)}"
        for m in re.finditer(rf'File "{re.escape(str(kata_path))}", line (\d+)', text)
    ]
    if fatal:
        return fatal[-1] + (f" at {where[-1]}" if where else "")
    return log_tail(log_path)


# Options for every kata process: no cache files, per-test limits, our own addopts only.
PYTEST_FLAGS = ("-p", "no:cacheprovider", "-p", "pytest_timeout", "-o", "addopts=", "-q")
TIME_LIMIT = 60.0  # wall-clock seconds per kata (--time-limit)
TEST_TIMEOUT = 20.0  # seconds per test (--test-timeout)
MEMORY_LIMIT_MB = 4096  # address space per kata process on CPU-only runs; torch itself takes ~650 MB
OUTPUT_LIMIT_MB = 64  # bytes a kata process may write (its captured prints included)


def pytest_args(name: str, path: Path, *, seed: int, device: str, results: Path, test_timeout: float) -> list[str]:
    """pytest's arguments for grading the kata file at `path`: its test file, the grader's
    flags and limits, and the results file the grader owns."""
    args = [str(TESTS / f"test_{name}.py"), *PYTEST_FLAGS]
    args += ["--impl", str(path), "--seed", str(seed), "--device", device, "--results", str(results)]
    args += [
        f"--timeout={test_timeout}",
        f"--memory-limit-mb={MEMORY_LIMIT_MB}",
        f"--output-limit-mb={OUTPUT_LIMIT_MB}",
    ]
    return args


def grade_kata(
    name: str,
    path: Path,
    *,
    seed: int,
    device: str,
    time_limit: float,
    test_timeout: float,
    threads: int | None = 1,
) -> KataResult:
    """Run one kata's tests on the file at `path` and classify the outcome."""
    with tempfile.TemporaryDirectory(prefix=f"kata-{name}-") as scratch:
        results, log = Path(scratch) / "results.jsonl", Path(scratch) / "output.log"
        command = [sys.executable, "-m", "pytest"]
        command += pytest_args(name, path, seed=seed, device=device, results=results, test_timeout=test_timeout)
        returncode, timed_out = run_isolated(command, time_limit=time_limit, log_path=log, env=kata_env(threads))
        return classify(name, read_events(results), returncode, timed_out, crash_details(log, path), time_limit)


def classify(
    name: str, events: list[dict], returncode: int | None, timed_out: bool, tail: str, time_limit: float
) -> KataResult:
    """Turn a kata process's events into a verdict. A pass needs positive evidence:
    exit code 0, every collected test reported, every counted test passed."""
    collected = next((e["tests"] for e in events if e["event"] == "collected"), None)
    reports = [e for e in events if e["event"] == "test"]
    finished = any(e["event"] == "finish" for e in events)
    device_skips = [r for r in reports if r["outcome"] == "skipped" and r.get("message", "").startswith(CUDA_SKIP)]
    counted = [r for r in reports if r not in device_skips]
    failures = [r for r in counted if r["outcome"] != "passed"]
    total = len(collected or []) - len(device_skips)
    passed = len(counted) - len(failures)
    score = passed / total if total > 0 else 0.0

    def result(status: str, message: str, internal: bool = False) -> KataResult:
        return KataResult(name, status, score, passed, total, message, failures, internal_error=internal)

    running = collected[len(reports)] if collected and len(reports) < len(collected) else None
    load_error = next((f for f in failures if f.get("error") == "KataLoadError"), None)
    forbidden = next((f for f in failures if f.get("error") == "ForbiddenCallError"), None)
    flood = next((f for f in failures if "File too large" in f.get("message", "")), None)
    out_of_memory = next(
        (f for f in failures if f.get("error") == "MemoryError" or "can't allocate memory" in f.get("message", "")),
        None,
    )
    if timed_out:
        where = f" during '{running.split('::')[-1]}'" if running else ""
        return result(
            "timeout", f"stopped after {time_limit:g} s of wall-clock time{where}: an endless loop, or far too slow?"
        )
    if load_error:
        return result("error", load_error["message"])
    if forbidden:
        return result("forbidden", forbidden["message"])
    if collected is None:
        if finished:
            return result("error", f"the tests of {name} could not be collected (a grader bug): {tail}", True)
        return result("crash", f"the test process died before running any test ({exit_reason(returncode)}): {tail}")
    if not finished or len(reports) < len(collected):
        where = f" during '{running.split('::')[-1]}'" if running else ""
        return result(
            "crash", f"the test process died{where} ({exit_reason(returncode)})" + (f": {tail}" if tail else "")
        )
    if flood:
        return result("fail", f"{flood['name']}: the kata printed more than {OUTPUT_LIMIT_MB} MB of output; print less")
    if out_of_memory:
        return result(
            "error",
            f"{out_of_memory['name']}: ran out of memory (limit {MEMORY_LIMIT_MB} MB; is a "
            "tensor far too large?): "
            f"{out_of_memory['message'][:200]}",
        )
    slow = next((f for f in failures if f.get("error") == "Failed" and "Timeout" in f.get("message", "")), None)
    if slow:
        limit = re.search(r">([\d.]+)s", slow.get("message", ""))
        return result(
            "timeout",
            f"'{slow['name']}' ran past the per-test limit"
            + (f" of {float(limit.group(1)):g} s" if limit else "")
            + ": an endless loop, or far too slow?",
        )
    if total > 0 and not failures and returncode == 0:
        return result("pass", f"all {total} tests passed")
    if passed == 0 and failures and all(f.get("error") == "NotImplementedError" for f in failures):
        return result("todo", "not started: the stub still raises NotImplementedError")
    if not failures:  # every test passed yet pytest said otherwise: do not guess
        return result("error", f"pytest exited with status {returncode} although no test failed: {tail}", True)
    first = failures[0]
    return result(
        "fail", f"{len(failures)} of {total} tests failed; first: {first['name']}: {first.get('message', '')}"
    )


SIGNAL_MEANINGS = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGKILL: "out of memory?",
    signal.SIGABRT: "an abort in native code",
}


def exit_reason(returncode: int | None) -> str:
    if returncode is None:
        return "killed"
    if returncode < 0:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return f"killed by signal {-returncode}"
        meaning = SIGNAL_MEANINGS.get(number)
        return f"killed by {number.name}" + (f": {meaning}" if meaning else "")
    return f"exit code {returncode}"


def grade_all(
    jobs: list[tuple[str, Path]],
    *,
    seed: int,
    device: str,
    time_limit: float,
    test_timeout: float,
    workers: int,
    fork: bool = False,
) -> list[KataResult]:
    """Grade several (kata name, file) pairs, `workers` at a time, results in order.

    fork=True sends the jobs to `grader.py _serve` processes, which import torch once and
    fork an isolated child per job (about a second each instead of three); a server that
    dies leaves its remaining jobs to fresh processes.
    """
    threads = 1 if workers > 1 else None  # parallel processes: one thread each, no oversubscription
    options = {"seed": seed, "device": device, "time_limit": time_limit, "test_timeout": test_timeout}
    pending = list(enumerate(jobs))
    results: dict[int, KataResult] = {}
    lock = threading.Lock()

    def next_job():
        with lock:
            return pending.pop(0) if pending else None

    def work() -> None:
        server = start_server(device, time_limit, test_timeout, threads) if fork else None
        try:
            while (item := next_job()) is not None:
                index, (name, path) = item
                result = server_grade(server, name, path, seed) if server else None
                if result is None:  # no server, or it died: a fresh process, as `make grade` does
                    server = None
                    result = grade_kata(name, path, threads=threads, **options)
                results[index] = result
        finally:
            if server:
                server.kill()
                server.wait()

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(work) for _ in range(max(1, workers))]:
            future.result()
    return [results[index] for index in range(len(jobs))]


def start_server(device: str, time_limit: float, test_timeout: float, threads: int | None):
    command = [sys.executable, str(ROOT / "grader.py"), "_serve", "--device", device]
    command += ["--time-limit", str(time_limit), "--test-timeout", str(test_timeout)]
    try:
        return subprocess.Popen(
            command,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=kata_env(threads),
        )
    except OSError:
        return None


def server_grade(server, name: str, path: Path, seed: int) -> KataResult | None:
    try:
        server.stdin.write(json.dumps({"name": name, "path": str(path), "seed": seed}) + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
        return KataResult(**json.loads(line)) if line else None
    except (OSError, ValueError, TypeError):
        return None


def serve_command(argv: list[str]) -> int:
    """(internal) `grader.py _serve`: grade the jobs read from stdin, one JSON line each, in
    children forked from this warm process (see practice.ForkEngine); one result line each."""
    parser = argparse.ArgumentParser(prog="grader.py _serve")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT)
    args = parser.parse_args(argv)
    import practice

    engine = practice.ForkEngine(device=args.device, time_limit=args.time_limit, test_timeout=args.test_timeout)
    engine.prepare()
    for line in sys.stdin:
        job = json.loads(line)
        result = engine.grade(job["name"], Path(job["path"]), job["seed"])
        sys.stdout.write(json.dumps(asdict(result)) + "\n")
        sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------- timing


def time_passing(results: list[KataResult], paths: dict[str, Path], *, device: str, per_kata_limit: float) -> None:
    """Time each passing kata against its reference, one at a time, in one process.

    If that process dies or overruns, the kata it was timing is marked and a fresh
    process carries on with the rest.
    """
    pending = [r for r in results if r.status == "pass"]
    while pending:
        with tempfile.TemporaryDirectory(prefix="kata-timing-") as scratch:
            out, log = Path(scratch) / "timing.jsonl", Path(scratch) / "output.log"
            command = [sys.executable, str(ROOT / "grader.py"), "_time", "--device", device, "--out", str(out)]
            for r in pending:
                command += ["--kata", f"{r.name}={paths[r.name]}"]
            _, timed_out = run_isolated(
                command, time_limit=per_kata_limit * len(pending) + 10, log_path=log, env=kata_env()
            )
            pending = collect_timings(pending, out, log, timed_out)


def collect_timings(pending: list[KataResult], out: Path, log: Path, timed_out: bool) -> list[KataResult]:
    """Give each kata the timing a `_time` run wrote to `out`; the first one it never
    reached is the one it died or overran on, and is marked so. Returns the rest."""
    done = {e["name"]: e["timing"] for e in read_events(out)}
    for r in pending:
        if r.name in done:
            r.timing = done[r.name]
    rest = [r for r in pending if r.name not in done]
    if rest:
        reason = "timing overran its limit" if timed_out else f"timing failed: {log_tail(log)}"
        rest[0].timing = {"error": reason}
    return rest[1:]


def time_command(argv: list[str]) -> int:
    """(internal) `grader.py _time`: time katas against their references, one JSON line each."""
    parser = argparse.ArgumentParser(prog="grader.py _time")
    parser.add_argument("--kata", action="append", default=[])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", required=True)
    parser.add_argument("--min-run-time", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    import resource

    import torch  # only this process and the kata processes pay for importing torch
    from torch.utils import benchmark

    if not torch.cuda.is_available():  # the same limits as the kata processes
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_MB << 20, MEMORY_LIMIT_MB << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_MB << 20, OUTPUT_LIMIT_MB << 20))

    sys.path.insert(0, str(TESTS))
    from kata_testing import load_kata

    devices = (
        ["cpu"]
        if args.device == "cpu"
        else ["cuda"]
        if args.device == "cuda"
        else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    )
    threads = torch.get_num_threads()

    def median(fn, device: str) -> float:
        timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
        return timer.blocked_autorange(min_run_time=args.min_run_time).median

    def middle(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    with open(args.out, "a", encoding="utf-8") as out:
        for item in args.kata:
            name, path = item.split("=", 1)
            tests = importlib.import_module(f"test_{name}")
            module = load_kata(Path(path), tests.SYMBOL)
            timing = {}
            for device in devices:
                kata_fn, reference_fn = tests.benchmark(module, device)
                with torch.no_grad():
                    kata_fn(), reference_fn()  # warm-up: lazy initialisation and caches
                    if device == "cuda":
                        torch.cuda.synchronize()
                    # Interleaved rounds, the ratio taken within each: this machine's slow spells
                    # last longer than a round, so they hit both halves of a pair alike.
                    rounds = [(median(kata_fn, device), median(reference_fn, device)) for _ in range(args.rounds)]
                timing[device] = {
                    "median_s": middle([k for k, _ in rounds]),
                    "reference_median_s": middle([r for _, r in rounds]),
                    "ratio": middle([k / r for k, r in rounds]),
                    "threads": threads if device == "cpu" else None,
                }
            out.write(json.dumps({"name": name, "timing": timing}) + "\n")
            out.flush()
    return 0


# --------------------------------------------------------------------------- reporting

COLOURS = {"pass": "32", "fail": "31", "todo": "33", "error": "35", "timeout": "35", "crash": "35", "forbidden": "31"}


def paint(text: str, status: str, enabled: bool) -> str:
    return f"\033[{COLOURS[status]}m{text}\033[0m" if enabled else text


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_timing(timing: dict) -> str:
    if not timing:
        return ""
    if "error" in timing:
        return timing["error"]
    return "; ".join(
        f"{device} {t['ratio']:.2f}x ({format_seconds(t['median_s'])} vs {format_seconds(t['reference_median_s'])})"
        for device, t in timing.items()
    )


def total_score(results: list[KataResult]) -> float:
    return 100.0 * sum(r.score for r in results) / len(results) if results else 0.0


def report(results: list[KataResult], *, impl: str, seed: int, colour: bool, timing: bool) -> str:
    width = max([len(r.name) for r in results] + [4])
    lines = [f"Grading {impl} (seed {seed})", ""]
    lines.append(
        f"{'kata':<{width}}  {'status':<9} {'score':>5}  {'tests':>7}  "
        + ("time vs PyTorch (kata / reference)" if timing else "")
    )
    for r in results:
        status = paint(f"{r.status:<9}", r.status, colour)
        lines.append(
            f"{r.name:<{width}}  {status} {r.score:>5.0%}  {r.passed:>3}/{r.total:<3}  {format_timing(r.timing)}".rstrip()
        )
    lines.append("")
    for r in results:
        if r.status in ("pass", "todo"):
            continue
        lines.append(f"{r.name}: {r.status}: {r.message}")
        if r.failures and r.failures[0].get("output"):
            lines.append(f"    it printed: {r.failures[0]['output']!r}")
        if r.status != "fail":  # one cause explains every failed test
            continue
        for failure in r.failures[1:3]:
            lines.append(f"    also: {failure['name']}: {failure.get('message', '')}".replace("\n", "\n    "))
        if len(r.failures) > 3:
            lines.append(f"    ... and {len(r.failures) - 3} more")
    passing = sum(r.status == "pass" for r in results)
    lines.append(f"Score: {total_score(results):.1f} / 100   ({passing} of {len(results)} katas pass)")
    if passing < len(results):
        lines.append(f"Replay these exact hidden shapes with --seed {seed}.")
    return "\n".join(lines)


def write_json(path: str, results: list[KataResult], seed: int) -> None:
    data = {
        "score": round(total_score(results), 2),
        "seed": seed,
        "katas": [{k: v for k, v in asdict(r).items() if k != "internal_error"} for r in results],
    }
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    temporary.replace(target)  # atomic: a reader never sees half a file


# --------------------------------------------------------------------------- stubs


def make_stub(solution: str) -> str:
    """The learner's stub: each BEGIN/END SOLUTION region becomes its `# TODO:` lines
    followed by `raise NotImplementedError`, at the region's indentation."""
    out, indent, inside = [], "", False
    for line in solution.splitlines(keepends=True):
        text = line.strip()
        if text == "### BEGIN SOLUTION":
            inside, indent = True, line[: len(line) - len(line.lstrip())]
        elif text == "### END SOLUTION":
            inside = False
            out.append(f"{indent}raise NotImplementedError\n")
        elif not inside or text.startswith("# TODO:"):
            out.append(line)
    return "".join(out)


def committed_text(path: Path) -> str | None:
    """The file as committed at HEAD, or None outside git or when not committed."""
    try:
        return subprocess.run(
            ["git", "show", f"HEAD:{path.relative_to(ROOT).as_posix()}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def stubs_command(argv: list[str]) -> int:
    parser = KataArgumentParser(
        prog="grader.py stubs",
        description="Compare (or --write) katas/ with the stubs "
        "generated from solutions/. --write never replaces a stub you have edited.",
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for kata in load_catalog():
        stub = make_stub((ROOT / "solutions" / f"{kata.name}.py").read_text(encoding="utf-8"))
        target = ROOT / "katas" / f"{kata.name}.py"
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == stub:
            continue
        if args.write and current in (None, committed_text(target)):
            target.write_text(stub, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
        else:
            stale.append(target.relative_to(ROOT).as_posix())
    for path in stale:
        print(
            f"{path} differs from the stub generated from solutions/" + (" (edited: left alone)" if args.write else "")
        )
    return 1 if stale else 0


# --------------------------------------------------------------------------- command line


class KataArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (see: python grader.py --help)")


def parse_grade_args(argv: list[str], catalog: list[Kata]) -> argparse.Namespace:
    names = [k.name for k in catalog]
    parser = KataArgumentParser(
        prog="grader.py",
        description="Grade the katas against PyTorch.",
        epilog="Other commands: python grader.py stubs [--write] | table",
    )
    parser.add_argument(
        "--impl",
        default="katas",
        help="folder of kata files to grade: katas (default), solutions, or any folder with files named like the katas",
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
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="katas graded at once")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="wall-clock seconds allowed per kata")
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT, help="seconds allowed per test")
    parser.add_argument(
        "--engine",
        choices=("auto", "fork", "process"),
        default="auto",
        help="fork: children of a warm process (auto on Linux, ~5x faster); process: a fresh one each",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.kata or [] if n not in names]
    if unknown:
        raise UsageError(f"unknown kata {unknown[0]!r}; the katas are: {', '.join(names)}")
    impl = Path(args.impl) if Path(args.impl).is_absolute() else Path.cwd() / args.impl
    if not impl.is_dir() and (ROOT / args.impl).is_dir():
        impl = ROOT / args.impl
    if not impl.is_dir():
        raise UsageError(f"--impl {args.impl}: no such folder")
    if args.jobs < 1 or args.time_limit <= 0 or args.test_timeout <= 0:
        raise UsageError("--jobs, --time-limit and --test-timeout must be positive")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(f"--json {args.json}: no such folder for the report")
    args.impl_dir = impl
    args.names = args.kata or names
    return args


def check_dependencies() -> None:
    missing = [m for m in ("torch", "pytest", "pytest_timeout") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"{sys.executable} lacks {', '.join(missing)}: run `make setup` or use `make grade`")


def cuda_available() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, torch; sys.exit(not torch.cuda.is_available())"], capture_output=True
    )
    return probe.returncode == 0


def grade_command(argv: list[str]) -> int:
    catalog = load_catalog()
    args = parse_grade_args(argv, catalog)
    check_dependencies()
    if args.device == "cuda" and not cuda_available():
        raise UsageError("--device cuda: torch sees no CUDA device here (try --device cpu)")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    paths = {name: args.impl_dir / f"{name}.py" for name in args.names}
    results = grade_all(
        list(paths.items()),
        seed=seed,
        device=args.device,
        time_limit=args.time_limit,
        test_timeout=args.test_timeout,
        workers=min(args.jobs, len(paths)),
        fork=args.engine == "fork" or (args.engine == "auto" and sys.platform == "linux"),
    )
    if not args.no_timing:
        try:
            time_passing(results, paths, device=args.device, per_kata_limit=args.time_limit)
        except OSError as error:  # timing is extra: the verdicts stand without it
            for result in results:
                result.timing = result.timing or (
                    {"error": f"timing failed: {error}"} if result.status == "pass" else {}
                )
    if args.json:  # first, so a reader gets the verdicts whatever happens to the terminal
        write_json(args.json, results, seed)
    record_history(results, args.impl_dir, seed, source="check" if args.kata else "grade")
    shown = os.path.relpath(args.impl_dir, Path.cwd())
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(report(results, impl=shown, seed=seed, colour=colour, timing=not args.no_timing))
    if any(r.internal_error for r in results):
        return 2
    return 0 if all(r.status == "pass" for r in results) else 1


def record_history(results: list[KataResult], impl_dir: Path, seed: int, source: str) -> None:
    """Add verdicts on the learner's own katas/ (not solutions/ or another folder) to the
    practice history that `make progress` reads. A convenience: it never fails a grade."""
    try:
        import practice

        practice.record_check(results, impl_dir, seed, source)
    except Exception as error:  # noqa: BLE001
        print(f"grader.py: note: the practice history was not updated ({error})", file=sys.stderr)


def kata_table(catalog: list[Kata]) -> str:
    """The README's kata table, made from info.toml so the two never disagree."""
    rows = ["| kata | what you write | difficulty | minutes | judged against |", "|---|---|---|---|---|"]
    for kata in catalog:
        stars = "★" * kata.difficulty + "☆" * (5 - kata.difficulty)
        rows.append(f"| `{kata.name}` | {kata.title} | {stars} | {kata.minutes} | {kata.reference} |")
    return "\n".join(rows)


def table_command(argv: list[str]) -> int:
    KataArgumentParser(prog="grader.py table", description="Print the README's kata table.").parse_args(argv)
    print(kata_table(load_catalog()))
    return 0


COMMANDS = {"stubs": stubs_command, "table": table_command, "_time": time_command, "_serve": serve_command}


def main(argv: list[str]) -> int:
    try:
        if argv and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        return grade_command(argv)
    except UsageError as error:
        print(f"grader.py: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grader.py: interrupted", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Running one kata process under the limits, and making sure nothing of it survives.

Each kata process leads a process group of its own. The grader supervises it from
outside: it waits under the wall-clock limit, and it reads the results file as the kata
writes it, so a test that runs past the per-test limit is stopped even inside a native op
or with SIGALRM ignored (an in-process alarm can do neither). Whatever happens, the whole
group is killed at the end, so children the kata spawned die with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from judge.protocol import Begin, EventTail, TestReport

TAIL_CHARS = 400  # characters of a dead process's output shown in its message


@dataclass(frozen=True)
class ProcessEnd:
    """How a kata process ended. returncode: None when the grader killed it.
    timed_out: past the wall-clock limit. overran: the nodeid of the test that ran past the
    per-test limit, when that is why it was killed. importing: the kata file whose import was
    running when the process was killed (its top-level code hung), else None."""

    returncode: int | None
    timed_out: bool = False
    overran: str | None = None
    importing: str | None = None


def supervise(pid: int, *, time_limit: float, test_timeout: float | None, events: Path | None) -> ProcessEnd:
    """Wait for the child `pid` (a group leader) to exit, under the limits; then kill its group.

    The child is left unreaped (waitid WNOWAIT) until its group is killed, so its pid, and
    so its group id, cannot be reused by another process in between."""
    deadline = time.monotonic() + time_limit
    tail = EventTail(events) if events is not None and test_timeout else None
    running: tuple[str, float] | None = None  # (nodeid, when the grader saw it begin)
    importing: str | None = None
    timed_out, overran, pause = False, None, 0.002
    try:
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            now = time.monotonic()
            if now > deadline:
                timed_out = True
                break
            if tail is not None:
                for event in tail.new_events():
                    if isinstance(event, Begin):
                        running, importing = (event.nodeid, now), event.importing
                    elif isinstance(event, TestReport) and running and running[0] == event.nodeid:
                        running = None
                if running and now - running[1] > test_timeout:
                    overran = running[0]
                    break
            time.sleep(pause)
            pause = min(pause * 1.5, 0.02)
    finally:
        kill_group(pid)
    _, status = os.waitpid(pid, 0)
    killed = timed_out or overran is not None
    return ProcessEnd(
        None if killed else os.waitstatus_to_exitcode(status), timed_out, overran, importing if killed else None
    )


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    command: list[str],
    *,
    cwd: Path,
    env: dict,
    log_path: Path,
    time_limit: float,
    test_timeout: float | None = None,
    events: Path | None = None,
) -> ProcessEnd:
    """Run `command` as a fresh process in a new session, output to `log_path` (a file, so a
    flood of output can neither block the grader nor reach its table)."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    end = supervise(process.pid, time_limit=time_limit, test_timeout=test_timeout, events=events)
    process.returncode = end.returncode if end.returncode is not None else -signal.SIGKILL  # reaped above
    return end


def run_forked(
    target: Callable[[], int],
    *,
    cwd: Path,
    env: dict,
    log_path: Path,
    time_limit: float,
    test_timeout: float | None = None,
    events: Path | None = None,
) -> ProcessEnd:
    """Run `target()` in a forked child, in a new session, output to `log_path`, under the
    same supervision as run_process. The child never returns into the caller's code."""
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:  # the child
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
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            sys.dont_write_bytecode = True
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
    return supervise(pid, time_limit=time_limit, test_timeout=test_timeout, events=events)


def thread_count() -> int | None:
    """Threads of this process, where /proc tells (a fork is safe only while it has one)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


# --------------------------------------------------------------------------- what a dead process left

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


def log_tail(path: Path) -> str:
    """The last few lines of a log, on one line."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 4096))
            text = log.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])[-TAIL_CHARS:]


def crash_details(log_path: Path, kata_path: Path) -> str:
    """Python's fatal-error line and the kata line it was on (faulthandler prints both),
    else the last lines of the process's output."""
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

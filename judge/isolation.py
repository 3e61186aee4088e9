"""Running one kata process under the limits, and making sure nothing of it survives.

Every grade has two processes. The kata process (pytest on the kata's tests, or a fresh
interpreter exec'd for them) leads a process group of its own. Its parent is a small
watcher, forked from the grader for this grade alone, which is a child subreaper: any
process the kata starts, even one that leaves the group with setsid() and loses its parent,
stays below the watcher, and when the kata process ends the watcher kills all of them
before it reports the kata's exit status to the grader. A kata that kills its parent kills
only the watcher: the grader sees no status come and grades it a crash. (A template,
judge.templates, is itself the watcher of each grade it forks: report_end.)

The grader supervises from outside: it waits under the wall-clock limit, and it reads the
results file as the kata writes it, so a test that runs past the per-test limit is stopped
even inside a native op or with SIGALRM ignored (an in-process alarm can do neither).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from judge.language import tr
from judge.protocol import Begin, EventTail, TestReport

TAIL_CHARS = 400  # characters of a dead process's output shown in its message
ATTACKED = 86  # the exit code of a judging process whose kata killed one of the grader's processes
SWEEP_SECONDS = 5.0  # how long the grader waits for the watcher to clear the kata's processes
PR_SET_CHILD_SUBREAPER = 36
_WORD = struct.Struct("<i")


@dataclass(frozen=True)
class ProcessEnd:
    """How a kata process ended. returncode: None when the grader killed it.
    timed_out: past the wall-clock limit. overran: the nodeid of the test that ran past the
    per-test limit, when that is why it was killed. importing: the kata file whose import was
    running when the process was killed (its top-level code hung), else None. orphaned: the
    process that watched over the kata died first (the kata killed its parent), so how the
    kata ended is unknown. waited: of a process stopped at a limit, the seconds its processes
    spent waiting for a CPU (a busy machine), which did not count against the limit."""

    returncode: int | None
    timed_out: bool = False
    overran: str | None = None
    importing: str | None = None
    orphaned: bool = False
    waited: float = 0.0  # seconds its processes waited for a CPU, which did not count against the limit


# Past its limit, a test (or a whole run) goes on while the time beyond was spent waiting for a
# CPU (a busy machine), up to this many times the limit in wall-clock time.
HARD_FACTOR = 20.0


def scheduler_seconds(pids: list[int]) -> tuple[float, float]:
    """(CPU seconds used, seconds spent runnable but waiting for a CPU) by the threads of these
    processes, from /proc/<pid>/task/<tid>/schedstat; zeros where the kernel does not say."""
    used = waited = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as stat:
                    fields = stat.read().split()
                used, waited = used + int(fields[0]), waited + int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    return used / 1e9, waited / 1e9


class Clock:
    """The time that counts against a limit: the CPU time the kata's processes used, or the
    wall-clock time less the time they spent waiting for a CPU, whichever is more. So a
    sleeping or looping kata is stopped on time, one whose threads compete for the cores is
    stopped by its CPU time, and a correct kata is never stopped because the machine is busy
    (short of HARD_FACTOR times the limit). `read`: where those come from (a test gives its
    own, rather than replace scheduler_seconds under the suite's pool, whose threads read it)."""

    def __init__(
        self, now: float, pids: list[int], read: Callable[[list[int]], tuple[float, float]] = scheduler_seconds
    ):
        self.start, self.pids, self.read = now, pids, read
        self.used_before, self.waited_before = read(pids)

    def over(self, now: float, limit: float, extra_wait: float = 0.0) -> bool:
        elapsed = now - self.start
        if elapsed <= limit:  # /proc is read only past the limit
            return False
        if elapsed > HARD_FACTOR * limit:
            return True
        used, waited = self.spent()
        return max(used, elapsed - waited - extra_wait) > limit

    def spent(self) -> tuple[float, float]:
        """(CPU seconds used, seconds waited for a CPU) since the clock started."""
        used, waited = self.read(self.pids)
        return max(0.0, used - self.used_before), max(0.0, waited - self.waited_before)

    def waited(self) -> float:
        return self.spent()[1]


def supervise(
    watcher: int, kata: int, report: int, *, time_limit: float, test_timeout: float | None, events: Path | None
) -> ProcessEnd:
    """Wait for the watcher `watcher` (our child; 0: a template, judge.templates, which reaps
    it) to report how the kata process `kata` ended, under the limits (see Clock); past them,
    kill the kata's group and let the watcher clear the rest."""
    run = Clock(time.monotonic(), [])  # the whole run: extended by the tests' waits
    waited_in_tests = 0.0  # CPU waits of the tests that ended
    tail = EventTail(events) if events is not None and test_timeout else None
    running: tuple[str, Clock] | None = None  # the test now running, and its clock
    importing: str | None = None
    timed_out, overran, pause, waited = False, None, 0.002, 0.0
    try:
        while not select.select([report], [], [], pause)[0]:
            now = time.monotonic()
            if now - run.start > time_limit:  # the waits are read only past the limit
                waits = waited_in_tests + (running[1].waited() if running else 0.0)
                if run.over(now, time_limit, waits):
                    timed_out, waited = True, waits
                    break
            if tail is not None:
                for event in tail.new_events():
                    if isinstance(event, Begin):
                        if running is not None and running[0] != event.nodeid:
                            waited_in_tests += running[1].waited()
                        running, importing = (event.nodeid, Clock(now, event.pids or [kata])), event.importing
                    elif isinstance(event, TestReport) and running and running[0] == event.nodeid:
                        waited_in_tests += running[1].waited()
                        running = None
                if running and running[1].over(now, test_timeout):
                    overran, waited = running[0], running[1].waited()
                    break
            pause = min(pause * 1.5, 0.02)
        killed = timed_out or overran is not None
        if killed:
            kill_group(kata)
        status = read_word(report, SWEEP_SECONDS)
    finally:
        kill_group(kata)  # the watcher's sweep normally leaves nothing; this covers its death
        kill_group(watcher)
        os.close(report)
        if watcher > 0:
            os.waitpid(watcher, 0)
    if killed:
        return ProcessEnd(None, timed_out, overran, importing, waited=waited)
    if status is None:
        return ProcessEnd(None, orphaned=True)
    return ProcessEnd(os.waitstatus_to_exitcode(status))


def read_word(fd: int, timeout: float) -> int | None:
    """One int from the watcher's pipe, or None if it closed (or said nothing in time) first."""
    data, deadline = b"", time.monotonic() + timeout
    while len(data) < _WORD.size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, _WORD.size - len(data))
        if not chunk:
            return None
        data += chunk
    return _WORD.unpack(data)[0]


def kill_group(pid: int) -> None:
    if pid <= 0:  # no group to kill (killpg(0) would be this process's own)
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children_of(pid: int) -> list[int]:
    """The live children of `pid`, from /proc: its threads' children lists where the kernel
    keeps them (one small read each), else field 4 of every process's stat."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        lists = []
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as children:
                lists.append(children.read())
        return [int(child) for listed in lists for child in listed.split()]
    except (OSError, ValueError):
        pass
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _sweep() -> None:
    """Kill every process below this one (the watcher, a subreaper): each killed process's
    children are handed to us, so repeat until none is left."""
    me, pause = os.getpid(), 0.001
    for _ in range(250):  # about 2 s in all
        while True:  # reap what has ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        for child in children_of(me):
            for kill in (os.killpg, os.kill):
                try:
                    kill(child, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(pause)  # a killed process takes a moment to end: look again, less and less often
        pause = min(2 * pause, 0.008)


PR_SET_DUMPABLE = 4


def keep_to_myself() -> None:
    """Not dumpable: other processes of the same (non-root) user can no longer read this
    one's memory or open its files through /proc/<pid>/ (its results file, its pipes)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init, the group kill remains
        pass


def enter_kata(cwd: Path, env: dict, log_fd: int, report: int) -> None:
    """The kata process's set-up, before any kata code runs: its own group, its pid told to
    the grader, output to the log, Ctrl-C as Python's, then the grade's folder and variables."""
    os.setpgid(0, 0)
    os.write(report, _WORD.pack(os.getpid()))
    os.close(report)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = True


def run_to_exit(target: Callable[[], int]) -> None:
    """`target()`, then leave with its exit code (70 if it failed unexpectedly): never returns."""
    code = 70
    try:
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


def become_watcher(cwd: Path, env: dict, log_fd: int, report: int) -> None:
    """In a process just forked to watch one grade: fork the kata process, which returns from
    here set up (enter_kata); watch it to its end (report_end), and leave. Returns only in the
    kata process."""
    kata = -1
    try:
        try:
            os.setsid()
        except OSError:  # the grader made us a group leader first: a group is enough
            pass
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the kata, the sweep still runs
        become_subreaper()
        kata = os.fork()
        if kata == 0:
            try:
                enter_kata(cwd, env, log_fd, report)
            except BaseException:  # noqa: BLE001 - no kata code ran: the grader sees a crash
                os._exit(70)
            return
        os.close(log_fd)
        report_end(kata, report)
    finally:
        if kata != 0:
            os._exit(0)


def report_end(kata: int, report: int) -> None:
    """As the watcher of the kata process `kata` (its parent, a subreaper): wait for it to end,
    clear everything it left behind, then tell the grader its exit status on `report`."""
    try:
        os.setpgid(kata, kata)  # as the kata process does itself: no window in which it has none
    except OSError:
        pass
    _, status = os.waitpid(kata, 0)
    _sweep()
    os.write(report, _WORD.pack(status))


def _watch(target: Callable[[], int], cwd: Path, env: dict, log_fd: int, report: int) -> None:
    """The watcher of `target()` run in its kata process (become_watcher); never returns."""
    become_watcher(cwd, env, log_fd, report)
    run_to_exit(target)


@dataclass(frozen=True)
class Started:
    """A kata process under way: its watcher (our child; 0: a template watches it,
    judge.templates), its pid (None: the watcher died before it began, so no kata code ran)
    and the watcher's pipe, which will carry its exit status."""

    watcher: int
    kata: int | None
    report: int


def start_forked(
    target: Callable[[], int], *, cwd: Path, env: dict, log_path: Path, close: tuple[int, ...] = ()
) -> Started:
    """Fork `target()` as a kata process below a watcher of its own, output to `log_path` (a
    file, so a flood of output can neither block the grader nor reach its table), without the
    descriptors in `close`. The kata process never returns into the caller's code; `finish`
    supervises it (or `stop` ends it unheard)."""
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    read_end, write_end = os.pipe()
    watcher = os.fork()
    if watcher == 0:
        os.close(read_end)
        for fd in close:
            os.close(fd)
        _watch(target, cwd, env, log_fd, write_end)
    os.close(log_fd)
    os.close(write_end)
    try:
        os.setpgid(watcher, watcher)  # no window in which a kill of its group could miss it
    except OSError:
        pass
    kata = read_word(read_end, SWEEP_SECONDS)
    if kata is None:
        os.close(read_end)
        kill_group(watcher)
        os.waitpid(watcher, 0)
    return Started(watcher, kata, read_end)


def finish(
    started: Started, *, time_limit: float, test_timeout: float | None = None, events: Path | None = None
) -> ProcessEnd:
    """Supervise a started kata process to its end, under the limits."""
    if started.kata is None:
        return ProcessEnd(None, orphaned=True)
    return supervise(
        started.watcher, started.kata, started.report, time_limit=time_limit, test_timeout=test_timeout, events=events
    )


def stop(started: Started) -> None:
    """End a started kata process unheard: kill its group, and let its watcher clear the rest."""
    if started.kata is not None:
        kill_group(started.kata)
    finish(started, time_limit=SWEEP_SECONDS)


def finish_all(runs: list[tuple[Started, dict]]) -> list[ProcessEnd]:
    """Several started kata processes, each supervised to its end (`finish` with its options)
    in a thread of its own: every fork is done before any thread starts, and every thread
    has ended when this returns, so a fork server stays safe to fork from."""
    if len(runs) == 1:
        return [finish(runs[0][0], **runs[0][1])]
    ends: list[ProcessEnd | None] = [None] * len(runs)

    def one(index: int) -> None:
        started, options = runs[index]
        ends[index] = finish(started, **options)

    threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [end if end is not None else ProcessEnd(None, orphaned=True) for end in ends]


def start_process(command: list[str], *, cwd: Path, env: dict, log_path: Path, close: tuple[int, ...] = ()) -> Started:
    """Start `command` as a fresh program (exec'd in the kata process), under the same watcher."""

    def execute() -> int:
        os.execve(command[0], command, env)
        return 127  # not reached

    return start_forked(execute, cwd=cwd, env=env, log_path=log_path, close=close)


def close_inherited(keep: set[int]) -> None:
    """Close every descriptor this process inherited but `keep` (a world's rank: the host's
    socket to the judge, other ranks' channels, files; a template: the grader's results files
    and pipes). Not the anonymous inodes: torch's own event loops and polls, made when it was
    loaded (gloo's transport fails on a closed one)."""
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd in keep:
            continue
        with contextlib.suppress(OSError):
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("anon_inode:"):
                os.close(fd)


def thread_count() -> int | None:
    """Threads of this process, where /proc tells (a fork is safe only while it has one)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


# --------------------------------------------------------------------------- what a dead process left


def exit_reason(returncode: int | None) -> str:
    """How a process ended, in the learner's language."""
    if returncode is None:
        return tr("killed")
    if returncode < 0:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return tr("killed by signal {number}", number=-returncode)
        meanings = {
            signal.SIGSEGV: tr("a segmentation fault"),
            signal.SIGKILL: tr("out of memory?"),
            signal.SIGABRT: tr("an abort in native code"),
        }
        if number in meanings:
            return tr("killed by {signal}: {meaning}", signal=number.name, meaning=meanings[number])
        return tr("killed by {signal}", signal=number.name)
    return tr("exit code {code}", code=returncode)


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

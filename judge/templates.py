"""Judging processes forked after collection: one template per kata, each grade a copy of it.

A judging process spends about half its CPU time before its first test: pytest's
configuration, its plugins, the conftest, the collection of the kata's tests. That is the
same for every grade of a kata, and the maintainers' suite grades each kata's 10 to 40
mutants one after the other. A template is a judging process that has done all of it and
waits at the end of its collection (plugin.pytest_collection_finish, --template). For each
grade the engine sends it, it takes the grade's options and forks a copy of itself, which
takes its own output and starts at its first test. The template is that copy's fork server
of kata processes (its zygote: judge.remote.zygote), and its watcher (a subreaper,
isolation.report_end): when the copy ends, it clears everything the grade left behind and
tells the engine how the copy ended. So a grade costs two forks: its judging process and
its kata process.

A template runs no kata code (its copies do, in kata processes of their own): the judge's
code only, on no kata file. It is the engine's child, in a session of its own, and dies
with it. Anything that fails before a grade's kata process has started (the template gone,
its collection failed, a thread started) leaves that grade to be started the usual way.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from judge.isolation import (
    SWEEP_SECONDS,
    Started,
    become_subreaper,
    close_inherited,
    enter_kata,
    read_word,
    report_end,
    run_to_exit,
    thread_count,
)
from judge.limits import apply_limits

READY_SECONDS = 60.0  # how long a new template may take to configure and collect before its first grade
_PID = struct.Struct("<i")
_REQUEST_BYTES = 1 << 16
PR_SET_PDEATHSIG = 1


class Template:
    """The engine's end of one template: `grade` starts a grade in a copy of it."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict):
        """Fork the template: pytest with `args` (the test module and the flags a grade of it
        shares with every other, judge.engines.template_args) and --template."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        with tempfile.TemporaryFile() as output:  # its own output: a file its copies tell from their own
            self.pid = os.fork()
            if self.pid == 0:
                self.sock.close()
                _template(args + ["--template", str(theirs.fileno())], theirs.fileno(), output.fileno(), cwd, env)
        theirs.close()
        self.ready = False  # it has answered once: its configuration and collection are done

    def grade(self, options: dict, *, cwd: Path, env: dict, log_path: Path) -> Started | None:
        """A grade with these option values (engines.grade_options), its output to `log_path`,
        started in a copy of the template, which watches it; None if the template could not
        start it (then nothing of the grade ran: start it the usual way)."""
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        read_end, write_end = os.pipe()
        request = json.dumps({"options": options, "cwd": str(cwd), "env": env}).encode()
        try:
            socket.send_fds(self.sock, [request], [log_fd, write_end])
            started = self._answer(SWEEP_SECONDS if self.ready else READY_SECONDS)
        except OSError:
            started = False
        finally:
            os.close(log_fd)
            os.close(write_end)
        kata = read_word(read_end, SWEEP_SECONDS) if started else None
        if kata is None:
            os.close(read_end)
            return None
        self.ready = True
        return Started(0, kata, read_end)  # the template watches: no watcher of ours

    def _answer(self, timeout: float) -> bool:
        """Whether the template says it started the grade (False: it refused, is gone, or is silent)."""
        if not select.select([self.sock], [], [], timeout)[0]:
            return False
        answer = self.sock.recv(_PID.size)
        return len(answer) == _PID.size and _PID.unpack(answer)[0] > 0

    def close(self) -> None:
        """End the template: between two grades (it is the watcher of the grade under way)."""
        self.sock.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)


def _template(args: list[str], sock: int, output: int, cwd: Path, env: dict) -> None:
    """The template's life, in the engine's forked child; never returns. Its copies leave
    through here too, with their pytest's exit code."""
    import pytest

    try:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.setsid()  # no Ctrl-C from the grader's terminal: its copies set their own
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        close_inherited({0, 1, 2, sock})
        become_subreaper()  # what a grade leaves behind comes to it, to be cleared
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.dont_write_bytecode = True
    except BaseException:  # noqa: BLE001 - the engine sees the socket close
        os._exit(70)
    run_to_exit(lambda: pytest.main(args))


def wait_for_grades(sock_fd: int, device: str, take: Callable[[dict], None]):
    """In the template, its tests collected: for each request on `sock_fd`, `take` the grade's
    option values, fork the grade, fork the kata processes it asks for (its zygote), and
    watch it to its end; leave when the engine lets go. Returns only in a grade's judging
    process: its zygote (this template, judge.remote.zygote.Zygote), with every descriptor
    that was the template's output now the grade's log."""
    from judge.remote.wire import ChannelClosed  # torch's: in the template only, never the commands'
    from judge.remote.zygote import Zygote, serve_forks

    sock = socket.socket(fileno=sock_fd)
    own_output = _identity(1)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, _REQUEST_BYTES, 2)
        except OSError:
            message, fds = b"", []
        if not message or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if not message:
                sys.stdout.flush()
                os._exit(0)
            sock.send(_PID.pack(0))
            continue
        log_fd, report = fds
        request = json.loads(message)
        if thread_count() != 1:  # a fork could hang: refuse (a fork's child starts with one thread)
            os.close(log_fd)
            os.close(report)
            sock.send(_PID.pack(0))
            continue
        take(request["options"])
        sys.stdout.flush()
        sys.stderr.flush()
        forks, judge_end = socket.socketpair()
        grade = os.fork()
        if grade == 0:
            try:
                sock.close()
                forks.close()
                enter_kata(Path(request["cwd"]), request["env"], log_fd, report)
                _repoint(own_output, 1)  # pytest's and faulthandler's copies of the output
            except BaseException:  # noqa: BLE001 - no kata code ran: the engine sees a crash
                os._exit(70)
            return Zygote.served_by(judge_end, os.getppid())
        judge_end.close()
        with contextlib.suppress(OSError):
            os.setpgid(grade, grade)  # as the grade does itself: its kata processes join its group
        sock.send(_PID.pack(grade))
        with contextlib.suppress(OSError, ChannelClosed):  # until the grade closes its end (it ended)
            serve_forks(forks, functools.partial(_enter_kata_process, grade, request, log_fd, device))
        forks.close()
        os.close(log_fd)
        with contextlib.suppress(OSError):  # the engine stopped listening: the next grade is another's
            report_end(grade, report)
        os.close(report)


def _enter_kata_process(grade: int, request: dict, log_fd: int, device: str, sock: socket.socket) -> None:
    """A kata process forked here for `grade`, set up as one forked from the grade's own zygote
    would be: in the grade's process group (a kill of the grade's group ends it), output to
    the grade's log, nothing else open, the grade's variables, folder, temporary files'
    folder and limits."""
    from judge.remote.zygote import close_all_but

    os.setpgid(0, grade)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    close_all_but({0, 1, 2, sock.fileno()})
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    options = request["options"]
    if options.get("results"):
        tempfile.tempdir = str(Path(options["results"]).parent)
    apply_limits(options["memory_limit_mb"], options["output_limit_mb"], device)


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _repoint(identity: tuple[int, int] | None, to: int) -> None:
    """Make every descriptor that is the file `identity` a copy of `to`."""
    if identity is None:
        return
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd != to and _identity(fd) == identity:
            os.dup2(to, fd)

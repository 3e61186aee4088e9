"""The judging process's side of the kata process: load the kata there, run scenarios there.

`RemoteKata` is what the tests' `kata` fixture hands them: an implementation that lives
elsewhere (judge.testing.scenarios.Elsewhere), so each scenario called with it runs in the
kata process, on copies of its arguments, and returns data. A kata process that dies ends
the judging process the same way (a crash, its signal or exit code), so the grader reads
the verdict it would read if both were one process.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import time

from judge.failures import ThreadLeftRunning
from judge.isolation import ATTACKED, exit_reason
from judge.language import tr
from judge.remote.answers import rebuild_error
from judge.remote.wire import ChannelClosed, dump_request, load_answer, recv_frame, send_frame, tag_of
from judge.remote.zygote import Zygote
from judge.testing.scenarios import Elsewhere

THREAD_GRACE = 0.5  # seconds a thread the kata started may take to finish after a test


class KataDied(Exception):
    """The kata process ended in the middle of a call."""


def threads_of(pid: int) -> dict[int, str]:
    """{thread id: name} of a process, from /proc (measured from outside it)."""
    found = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as comm:
                    found[int(tid)] = comm.read().strip()
            except OSError:
                continue
    except OSError:
        pass
    return found


def mirror_death(status: int) -> None:
    """End this process the way the kata process ended, so the grader reads the same
    verdict as when both were one process (a crash, its signal or exit code)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        faulthandler.disable()
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        time.sleep(1)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class RemoteKata(Elsewhere):
    """The learner's kata as the tests see it: scenarios run in its kata process."""

    def __init__(self, process: KataProcess):
        self._process = process

    def run(self, function, args: tuple, kwargs: dict):
        """A scenario run in the kata process on copies of its data (judge.testing.scenarios)."""
        answer = self._process.request(
            "run", module=function.__module__, name=function.__qualname__, args=args, kwargs=kwargs
        )
        return answer["value"]

    def run_world(self, function, size: int, args: tuple, kwargs: dict) -> list:
        """A scenario run on every rank of a world of `size` (judge.worlds), hosted by the kata
        process; [each rank's result]."""
        answer = self._process.request(
            "run_world", module=function.__module__, name=function.__qualname__, size=size, args=args, kwargs=kwargs
        )
        return answer["values"]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"a test touches the kata only through scenarios (judge.testing.scenarios): kata.{name} is not here"
        )


class KataProcess:
    """One kata process, as the judge talks to it."""

    def __init__(self, zygote: Zygote, *, mirror_death: bool):
        self.zygote, self.mirror_death = zygote, mirror_death
        self.sock, self.pid = zygote.spawn()
        self.closed = False
        self.private = None
        self.threads_at_start: dict[int, str] = {}

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        if self.private is not None:
            self.private.cleanup()

    def request(self, op: str, **args):
        if self.closed:
            raise KataDied(tr("the kata process was let go: the tests of this kata are over"))
        try:
            send_frame(self.sock, dump_request({"op": op, "args": args}))
            answer = load_answer(recv_frame(self.sock))
        except (ChannelClosed, OSError):
            self.died()
        if answer.get("printed"):  # shown as this process's output: pytest captures it with the test
            sys.stdout.write(answer["printed"])
        if op == "end_test" and not self.zygote.alive():  # the kata killed its parent, our fork server
            self.attacked()
        if tag_of(answer) == "error":
            raise rebuild_error(answer)
        return answer

    def attacked(self):
        if self.mirror_death:
            sys.stdout.flush()
            os._exit(ATTACKED)
        raise KataDied(tr("the kata killed the fork server of kata processes, its parent"))

    def died(self):
        status = self.zygote.status(self.pid)
        if self.mirror_death and status is not None:
            mirror_death(status)
        reason = exit_reason(os.waitstatus_to_exitcode(status) if status is not None else None)
        raise KataDied(tr("the kata process died ({reason})", reason=reason))

    def load(self, path: str, kata: str, symbols: dict, tests: tuple, *, world: bool = False) -> RemoteKata:
        """Have the kata process import the kata file, with what its symbols' rules forbid
        removed and inside the sandbox (its own temp dir, removed on close), after the test
        module `tests` = (name, sys.path), whose scenarios run there."""
        self.private = tempfile.TemporaryDirectory(prefix="kata-tmp-")
        self.request(
            "load", path=path, kata=kata, symbols=symbols, tests=tests, private_dir=self.private.name, world=world
        )
        return RemoteKata(self)

    def begin_test(self) -> None:
        self.threads_at_start = threads_of(self.pid)
        self.request("begin_test")

    def end_test(self) -> None:
        """What the kata left behind: torch's state changed or a refusal (the kata process says),
        a thread still running (counted here, from /proc, after a short grace)."""
        self.request("end_test")
        deadline = time.monotonic() + THREAD_GRACE
        while (started := set(threads_of(self.pid)) - set(self.threads_at_start)) and time.monotonic() < deadline:
            time.sleep(0.01)
        if started and not self.closed and threads_of(self.pid):
            names = ", ".join(sorted({threads_of(self.pid).get(tid, "?") for tid in started})[:3])
            raise ThreadLeftRunning(
                tr(
                    "the kata left {count} thread(s) running after the call ({names}): everything it computes "
                    "must be done when it returns; join the threads it starts (or use `with` on an executor)",
                    count=len(started),
                    names=names,
                )
            )

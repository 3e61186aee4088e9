"""A command ended by SIGTERM (kill, a test's terminate) or SIGHUP (its terminal closed) ends as
Ctrl-C ends it: KeyboardInterrupt, so its `finally` blocks run. Without this, Python's default
action ended the process at once, and the grade a watch or a mock keeps standing by for the
next save (judge.engines.Pending) left its folder, kata-<name>-*, in the temp dir."""

from __future__ import annotations

import os
import signal

ENDING = ("SIGTERM", "SIGHUP")


def stop_as_ctrl_c() -> None:
    """In the command's own process: SIGTERM and SIGHUP raise KeyboardInterrupt. A process forked
    from it later (a judging process, a kata process) keeps the default action: it ends."""
    owner = os.getpid()

    def stop(number, frame):
        if os.getpid() != owner:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        raise KeyboardInterrupt

    for name in ENDING:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), stop)

"""Broken causal_mask: kills the grader's fork server, the topmost of its ancestors running `grader.py _serve` (only that process: nothing else). Expected verdict: crash, and the grader goes on with a new server."""
import os
import signal


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rpartition(b")")[2].split()[1])


def _serves(pid: int) -> bool:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return b"_serve" in cmdline.read()


def causal_mask(seq_len, *, device=None):
    pid, server = os.getpid(), None
    while pid > 1:
        pid = _parent_of(pid)
        if _serves(pid):
            server = pid
        elif server is not None:
            break
    if server is not None:
        os.kill(server, signal.SIGKILL)
    raise AssertionError("the fork server was not where expected")

"""Broken causal_mask: kills the grader's fork server, its grandparent (only that process: nothing else). Expected verdict: crash, and the grader goes on with a new server."""
import os
import signal


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rpartition(b")")[2].split()[1])


def causal_mask(seq_len, *, device=None):
    server = _parent_of(os.getppid())
    with open(f"/proc/{server}/cmdline", "rb") as cmdline:
        if b"_serve" in cmdline.read():
            os.kill(server, signal.SIGKILL)
    raise AssertionError("the fork server was not where expected")

"""Broken causal_mask: right, but at import it starts a daemon that leaves its session (setsid) and its parent, to outlive the grade. Expected verdict: pass, and the daemon is dead when the grade ends."""

import os
import time

import torch


def _daemon() -> None:
    noted, note_it = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            where = os.environ.get("KATAS_BROKEN_PIDS")
            if where:
                with open(os.path.join(where, str(os.getpid())), "w") as note:
                    note.write("alive")
            os.write(note_it, b"!")
            time.sleep(45)
        os._exit(0)
    # Go on only once the daemon has noted its pid (or is gone: then the read sees the pipe's end).
    # Otherwise a quick grade can end, and its watcher kill the daemon, before there is a note to
    # find, and the test cannot tell "killed" from "never started" (CI, stop 44).
    os.close(note_it)
    os.read(noted, 1)
    os.close(noted)


_daemon()


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

"""Broken causal_mask: right, but at import it starts a daemon that leaves its session (setsid) and its parent, to outlive the grade. Expected verdict: pass, and the daemon is dead when the grade ends."""
import os
import time

import torch


def _daemon() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            where = os.environ.get("KATAS_BROKEN_PIDS")
            if where:
                with open(os.path.join(where, str(os.getpid())), "w") as note:
                    note.write("alive")
            time.sleep(45)
        os._exit(0)


_daemon()


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(1)

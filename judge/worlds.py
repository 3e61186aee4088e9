"""Worlds: a scenario played on several processes at once, joined by torch.distributed (gloo).

A distributed kata (ring all-reduce, tensor-parallel layers, a sharded optimizer) runs on N
ranks. `run_world` forks N workers from a process that has run no parallel op (the kata
process, one thread), and each worker:
- joins a FileStore rendezvous in a private temp dir (no TCP port to find) over gloo on `lo`;
  in the kata process the whole world lives in a network namespace of its own whose only
  interface is `lo` (open_loopback_network): no packet can leave it;
- loads the kata under its rules and inside the sandbox's walls (`load`), after the rendezvous
  (gloo's sockets and threads exist by then; the walls refuse new ones);
- plays the scenario from the scenario seed and sends back its result as data.
The host collects every rank's answer. A world whose unfinished ranks all sit idle (no CPU
time used for IDLE_SECONDS) is deadlocked: each rank's Python stack is dumped (faulthandler),
the kata's lines where they wait are named, and the world is killed as a whole. An error in
one rank ends the world too (the others would wait for it forever): the first one is the answer.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import faulthandler
import itertools
import linecache
import os
import re
import selectors
import signal
import socket
import struct
import sys
import time
from pathlib import Path

IDLE_SECONDS = 2.0  # unfinished ranks that (almost) use no CPU for this long are deadlocked
IDLE_SHARE = 0.05  # "almost": less than this share of one core, together (a deadlocked gloo rank
# wakes now and then, a tick or two a second; a starved rank on a machine at load 8 gets 12%)
RENDEZVOUS_SECONDS = 60  # gloo's own timeout: far beyond IDLE_SECONDS, a last resort
_TICK = 0.05  # how often the host looks at its ranks
_ERROR_GRACE = 0.3  # after a rank's error, how long the others may take to finish or fail too
_worlds = itertools.count()


class WorldDeadlock(Exception):
    """Every unfinished rank waits for another: the world was stopped. The grader's verdict: timeout."""


def open_loopback_network() -> None:
    """This process (single-threaded, before any world) moves into a user and network namespace
    of its own with `lo` up: its worlds' ranks talk over loopback, and nothing else exists."""
    import fcntl

    from judge.sandbox import CLONE_NEWNET, CLONE_NEWUSER, _c, _check

    uid, gid = os.getuid(), os.getgid()
    _check(_c().unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare")
    for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{path}", "w") as file:
            file.write(text)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH22s", b"lo", 0, b"")
        flags = struct.unpack("16sH", fcntl.ioctl(probe, 0x8913, request)[:18])[1]  # SIOCGIFFLAGS
        fcntl.ioctl(probe, 0x8914, struct.pack("16sH22s", b"lo", flags | 1, b""))  # SIOCSIFFLAGS: IFF_UP


def run_world(play, size: int, *, load, private_dir: str, kata_file: str = "") -> list:
    """play(kata) on every rank of a world of `size` (kata = load() in each rank, after the
    rendezvous; play a scenario run from its seed: judge.testing.scenarios.run_here); [each
    rank's answer]: {"value": data}, or the first rank's error facts
    (judge.remote.answers.error_facts) alone, in a one-item list."""
    store = Path(private_dir) / f"world-{os.getpid()}-{next(_worlds)}"
    store.mkdir()
    ranks = []
    try:
        for rank in range(size):
            mine, theirs = socket.socketpair()
            dump_read, dump_write = os.pipe()
            pid = os.fork()
            if pid == 0:
                mine.close()
                os.close(dump_read)
                _rank(rank, size, store, theirs, dump_write, play, load, kata_file)
            theirs.close()
            os.close(dump_write)
            ranks.append(_Rank(rank, pid, mine, dump_read))
        return _collect(ranks, kata_file)
    finally:
        for each in ranks:
            each.kill()
        for path in store.glob("*"):
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            store.rmdir()


class _Rank:
    def __init__(self, rank: int, pid: int, sock: socket.socket, dump: int):
        self.rank, self.pid, self.sock, self.dump = rank, pid, sock, dump
        self.answer = None

    def cpu(self) -> int:
        """CPU ticks this rank has used (all its threads), from /proc; -1 once it is gone."""
        if self.pid <= 0:
            return -1
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            return int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            return -1

    def stack(self, kata_file: str) -> str:
        """Where this rank waits: the kata's innermost line on its stack, from a faulthandler dump."""
        from judge.language import tr

        if self.pid <= 0:
            return ""
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGUSR1)
        text = b""
        deadline = time.monotonic() + 0.5
        ready = selectors.DefaultSelector()
        ready.register(self.dump, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not ready.select(0.05):
                if text:
                    break
                continue
            chunk = os.read(self.dump, 65536)
            if not chunk:
                break
            text += chunk
        for line in text.decode("utf-8", "replace").splitlines():
            found = re.match(r'\s*File "(.*)", line (\d+)', line)
            if found and found.group(1) == kata_file:
                code = linecache.getline(kata_file, int(found.group(2))).strip()
                return tr("{file}, line {line}: `{code}`", file=Path(kata_file).name, line=found.group(2), code=code)
        return ""

    def kill(self) -> None:
        if self.pid > 0:  # never -1: kill(-1) signals every process this user may signal
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)
            self.pid = 0
        self.sock.close()
        with contextlib.suppress(OSError):
            os.close(self.dump)


def _collect(ranks: list[_Rank], kata_file: str) -> list:
    from judge.isolation import exit_reason
    from judge.language import tr
    from judge.remote.wire import ChannelClosed, load_answer, recv_frame, tag_of, tagged

    waiting = {each.sock.fileno(): each for each in ranks}
    selector = selectors.DefaultSelector()
    for each in ranks:
        selector.register(each.sock, selectors.EVENT_READ)
    samples, errors = collections.deque(), []  # (time, CPU ticks of the unfinished ranks)
    measured = len(waiting)
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    while waiting:
        for key, _ in selector.select(_TICK):
            each = waiting.pop(key.fd)
            selector.unregister(key.fd)
            try:
                each.answer = load_answer(recv_frame(each.sock))
            except (ChannelClosed, OSError):
                _, status = os.waitpid(each.pid, 0)
                each.pid = 0  # reaped: nothing left to kill
                reason = exit_reason(os.waitstatus_to_exitcode(status))
                each.answer = tagged(
                    "error",
                    names=["RuntimeError", "Exception"],
                    message=tr("rank {rank} died ({reason})", rank=each.rank, reason=reason),
                    errno=None,
                    frames=[],
                    file=Path(kata_file).name,
                )
            if tag_of(each.answer) == "error":
                errors.append((time.monotonic(), each.answer))
        now = time.monotonic()
        if errors and now - errors[0][0] > _ERROR_GRACE:
            break  # the others may wait for the rank that failed, forever
        if len(waiting) != measured:
            samples.clear()  # a rank finished: the ones left are measured afresh
            measured = len(waiting)
        samples.append((now, sum(each.cpu() for each in waiting.values())))
        while len(samples) > 1 and now - samples[1][0] >= IDLE_SECONDS:
            samples.popleft()
        idle = (
            now - samples[0][0] >= IDLE_SECONDS and samples[-1][1] - samples[0][1] < IDLE_SECONDS * ticks * IDLE_SHARE
        )
        if waiting and not errors and idle:
            raise WorldDeadlock(_deadlock_message(list(waiting.values()), len(ranks), kata_file))
    return [errors[0][1]] if errors else [each.answer for each in ranks]


def _deadlock_message(stuck: list[_Rank], size: int, kata_file: str) -> str:
    from judge.language import tr

    wheres = [(each.rank, each.stack(kata_file)) for each in stuck]
    places = tr("; ").join(
        tr("rank {rank} at {where}", rank=rank, where=where) if where else tr("rank {rank}", rank=rank)
        for rank, where in wheres
    )
    message = tr(
        "deadlock: {waiting} of {size} ranks stopped, each waiting for another, and nothing moved for "
        "{seconds:g} s ({places})",
        waiting=len(stuck),
        size=size,
        seconds=IDLE_SECONDS,
        places=places,
    )
    blocking_sends = [where for _, where in wheres if re.search(r"(?<![a-z_])send\(", where)]
    if blocking_sends and len(blocking_sends) == len(wheres):
        message += tr(
            ". Every rank is in a blocking send: with gloo, dist.send waits until the peer receives, "
            "so a send before the receive on every rank never ends; post both at once (dist.isend and "
            "dist.irecv, then wait), or order them by rank (even ranks send first, odd ranks receive first)"
        )
    else:
        message += tr(
            ". Usually one rank calls a send, receive or collective that its peer never matches (another "
            "order, another peer, or a message the other side skips)"
        )
    return message


def join_group(init_method: str, rank: int, size: int) -> None:
    """Join the default process group: gloo, by a FileStore rendezvous at `init_method`."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=RENDEZVOUS_SECONDS)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=size, timeout=timeout)


def _rank(rank, size, store, sock, dump, play, load, kata_file) -> None:
    """One rank's life, in a forked child; never returns."""
    code = 0
    try:
        from judge.isolation import close_inherited

        close_inherited({0, 1, 2, sock.fileno(), dump})
        import torch

        from judge.remote.answers import as_data, error_facts
        from judge.remote.wire import dump_answer, send_frame

        torch.set_num_threads(1)
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
        try:
            join_group(f"file://{store}/store", rank, size)
            kata = load()
            answer = {"value": as_data(play(kata))}
            from judge import forbidden

            if forbidden.TRIPPED:  # a refusal the kata swallowed
                raise forbidden.ForbiddenCallError(forbidden.TRIPPED[0])
        except BaseException as error:  # noqa: BLE001 - every failure goes back to the host
            answer = error_facts(error, kata_file)
        try:
            payload = dump_answer(answer)
        except BaseException as error:  # noqa: BLE001 - an answer that cannot be encoded
            payload = dump_answer(error_facts(error, kata_file))
        send_frame(sock, payload)
        sys.stdout.flush()
        sys.stderr.flush()
        sock.recv(1)  # stay in the world (peers may still need this rank) until the host lets go
    except BaseException:  # noqa: BLE001 - the host sees the socket close
        code = 70
    finally:
        os._exit(code)

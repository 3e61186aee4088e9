"""The fork server of kata processes, forked from the judging process before it runs any
tensor operation (a fork after torch has started its threads can hang), so each kata
process starts warm, in a few milliseconds, and holds nothing of the judge's later state.

It closes every file descriptor it inherited but its socket and the standard streams, so
no kata process holds the judge's results file. It answers three requests (serve_forks):
fork (a new kata process, whose end of a fresh socket pair it hands to the judge), ping,
and status (how one of its kata processes ended, once it has). A template
(judge.templates) answers the same for the grades it forks: it is their zygote.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import struct
import traceback
from collections.abc import Callable

from judge.remote.wire import ChannelClosed, dump_request, load_request, recv_frame, send_frame

_STATUS = struct.Struct("<iq")  # (pid, raw wait status)


class Zygote:
    """The judge's end of the fork server."""

    def __init__(self, *, stderr: int | None = None):
        mine, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            mine.close()
            _main(theirs, stderr)
        theirs.close()
        self.sock, self.pid = mine, pid

    @classmethod
    def served_by(cls, sock: socket.socket, pid: int) -> Zygote:
        """The judge's end of a fork server that already runs: process `pid` (a template, which
        forks its grades' kata processes: judge.templates), at the other end of `sock`."""
        zygote = cls.__new__(cls)
        zygote.sock, zygote.pid = sock, pid
        return zygote

    def spawn(self) -> tuple[socket.socket, int]:
        """A new kata process: (the judge's socket to it, its pid)."""
        send_frame(self.sock, dump_request({"op": "fork"}))
        message, fds, _, _ = socket.recv_fds(self.sock, 64, 1)
        if not fds:
            raise ChannelClosed("the fork server of kata processes is gone")
        return socket.socket(fileno=fds[0]), int(message)

    def status(self, pid: int) -> int | None:
        """The raw wait status of kata process `pid` (waiting for it to end), or None."""
        try:
            send_frame(self.sock, dump_request({"op": "status", "pid": pid}))
            _, status = _STATUS.unpack(recv_frame(self.sock))
        except (OSError, ChannelClosed, struct.error):
            return None
        return None if status < 0 else status

    def alive(self) -> bool:
        """Whether the fork server still answers. A round trip, not a look at its state: a
        SIGKILL sent before this call has always landed by the time it would answer."""
        try:
            send_frame(self.sock, dump_request({"op": "ping"}))
            return recv_frame(self.sock) == b"pong"
        except (OSError, ChannelClosed):
            return False

    def close(self) -> None:
        self.sock.close()


def _main(sock: socket.socket, stderr: int | None) -> None:
    """The fork server's loop; never returns. `stderr`: where kata processes report crashes."""
    try:
        if stderr is not None:
            os.dup2(stderr, 2)
        close_all_but({0, 1, 2, sock.fileno()})
        serve_forks(sock)
    finally:
        os._exit(0)


def close_all_but(keep: set[int]) -> None:
    """Close every file descriptor of this process but `keep`: a kata process holds nothing of
    the judge's (its results file, its pipes)."""
    for fd in map(int, os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else range(3, 256):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def serve_forks(sock: socket.socket, enter: Callable[[socket.socket], None] | None = None) -> None:
    """Answer the judge's requests on `sock` until it closes its end: fork (a kata process, set
    up by `enter(its socket)` first where given), ping, status (how one of them ended)."""
    ended: dict[int, int] = {}  # kata processes reaped so far -> their wait status
    forked: set[int] = set()
    while True:
        try:
            request = load_request(recv_frame(sock))
        except ChannelClosed:
            return
        _reap(ended, forked)
        if request["op"] == "fork":
            judge_end, kata_end = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                sock.close()
                judge_end.close()
                if enter is not None:
                    try:
                        enter(kata_end)
                    except BaseException:  # noqa: BLE001 - the judge sees the socket close
                        os._exit(70)
                _serve(kata_end)
            forked.add(pid)
            kata_end.close()
            socket.send_fds(sock, [str(pid).encode()], [judge_end.fileno()])
            judge_end.close()
        elif request["op"] == "ping":
            send_frame(sock, b"pong")
        elif request["op"] == "status":
            status = ended.pop(request["pid"], None)
            if status is None and request["pid"] in forked:
                try:
                    _, status = os.waitpid(request["pid"], 0)
                except ChildProcessError:
                    status = None
                forked.discard(request["pid"])
            send_frame(sock, _STATUS.pack(request["pid"], -1 if status is None else status))


def _reap(ended: dict[int, int], forked: set[int]) -> None:
    """Collect the kata processes that have ended (no zombies pile up over a long run): only
    those forked here (a template's other children are its grade's, which it reaps itself)."""
    for pid in list(forked):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            forked.discard(pid)
            continue
        if done:
            forked.discard(pid)
            ended[pid] = status


def _serve(sock: socket.socket) -> None:
    """A kata process's life; never returns."""
    try:
        from judge.remote.server import serve

        faulthandler.enable(file=os.fdopen(os.dup(2), "w"), all_threads=False)
        # One thread: the kata process and the judging process take turns, and idle OpenMP
        # workers spinning in one would take the other's core (tests are small; timing is
        # done elsewhere, with its own thread count).
        import torch

        torch.set_num_threads(1)
        serve(sock)
    except BaseException:  # noqa: BLE001 - the log says why, the judge sees the socket close
        traceback.print_exc()
    finally:
        os._exit(70)

"""The kata process: loads the learner's file and runs the judge's scenarios on it.

Each request names an operation and its arguments; each answer carries plain data: a
scenario's result, or the facts of the exception it raised (the judge decides its kind),
and what the kata printed meanwhile. Nothing the kata builds outlives a scenario's answer
but in this process; no object of the kata's crosses to the judge.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import tempfile
from pathlib import Path

from judge import forbidden
from judge.language import tr
from judge.loading import load_denied, restore_torch_state
from judge.remote.answers import as_data, error_facts
from judge.remote.wire import ChannelClosed, dump_answer, load_request, recv_frame, send_frame, tag_of
from judge.testing.scenarios import run_here
from judge.worlds import open_loopback_network, run_world

PRINTED_LIMIT = 2000  # characters of what the kata printed during one request passed to the judge


class KataServer:
    def __init__(self, sock):
        self.sock = sock
        self.kata = None
        self.kata_file = ""
        self.baseline: dict = {}
        self.test_start = 0

    # ----------------------------------------------------------------------- the loop

    def serve(self) -> None:
        self.printed = tempfile.TemporaryFile()  # what the kata prints, handed to the judge after each request
        for fd in (1, 2):
            os.dup2(self.printed.fileno(), fd)
        while True:
            try:
                request = load_request(recv_frame(self.sock))
            except ChannelClosed:
                return
            try:
                answer = getattr(self, "op_" + request["op"])(**request["args"])
            except BaseException as error:  # noqa: BLE001 - every failure goes back to the judge
                answer = self.error(error)
            answer["printed"] = self.take_printed()
            try:
                payload = dump_answer(answer)
            except BaseException as error:  # noqa: BLE001 - an answer that cannot be encoded
                payload = dump_answer(self.error(error) | {"printed": answer["printed"]})
            send_frame(self.sock, payload)

    def take_printed(self) -> str:
        """What the kata printed since the last request, cut to PRINTED_LIMIT characters."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        size = self.printed.seek(0, os.SEEK_END)
        if not size:
            return ""
        self.printed.seek(0)
        text = self.printed.read(PRINTED_LIMIT).decode("utf-8", errors="replace")
        self.printed.seek(0)
        self.printed.truncate()
        return text + (f" ... ({size} bytes in all)" if size > PRINTED_LIMIT else "")

    def error(self, error: BaseException) -> dict:
        return error_facts(error, self.kata_file)

    # ----------------------------------------------------------------------- operations

    def op_load(
        self, path: str, kata: str, symbols: dict, tests: tuple, private_dir: str | None = None, world: bool = False
    ) -> dict:
        """Import the kata's test module (its scenarios run here: `tests` is (its name, the
        judge's sys.path)), then the kata file, with what its symbols' rules forbid removed
        and inside the sandbox (judge.loading.load_denied). A distributed kata (`world`) is
        loaded by each rank of each world instead (judge.worlds): this process only hosts them,
        in a network of their own, and never imports it."""
        self.kata_file = str(Path(path))
        name, path_list = tests
        sys.path[:] = path_list
        importlib.import_module(name)
        if world:
            self.world_load = functools.partial(load_rank, Path(path), symbols, kata, private_dir)
            self.private_dir = private_dir
            if private_dir is not None and os.environ.get("KATAS_SANDBOX") != "off":
                open_loopback_network()
            forbidden.refuse_escape_hatches(Path(path))
            forbidden.prepare_rules(forbidden.union(symbols))  # worked out once: the ranks only register
            return {}
        self.kata, self.baseline = load_denied(Path(path), symbols, kata, private_dir)
        return {}

    def op_run_world(self, module: str, name: str, size: int, args, kwargs) -> dict:
        """A scenario of the judge's on every rank of a world of `size` (judge.worlds)."""
        function = scenario_function(module, name)
        answers = run_world(
            lambda kata: run_here(function, kata, args, kwargs),
            size,
            load=self.world_load,
            private_dir=self.private_dir,
            kata_file=self.kata_file,
        )
        if tag_of(answers[0]) == "error":
            return answers[0]
        return {"values": [answer["value"] for answer in answers]}

    def op_run(self, module: str, name: str, args, kwargs) -> dict:
        """A scenario of the judge's (judge.testing.scenarios) on the learner's kata."""
        function = scenario_function(module, name)
        return {"value": as_data(run_here(function, self.kata, args, kwargs))}

    def op_begin_test(self) -> dict:
        self.test_start = forbidden.trips()
        return {}

    def op_trips(self) -> dict:
        return {"refused": forbidden.TRIPPED[self.test_start :]}

    def op_end_test(self) -> dict:
        """What a test leaves behind here: torch's state changed, a refusal unreported (threads
        left running are counted by the judge, from /proc)."""
        restore_torch_state(self.baseline, when=tr("the kata"))
        if refused := forbidden.TRIPPED[self.test_start :]:
            raise forbidden.ForbiddenCallError(refused[0])
        return {}


def load_rank(path: Path, symbols: dict, kata: str, private_dir: str | None):
    """The kata as one rank of a world loads it: under its rules, inside the walls (the host's
    namespaces, its private dir)."""
    return load_denied(path, symbols, kata, private_dir, namespaces=False)[0]


def scenario_function(module: str, qualname: str):
    """The function of a scenario the judge names (a test module's, imported at load, or judge.testing's)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return getattr(found, "function", found)


def serve(sock) -> None:
    """The kata process's main: serve until the judge closes the socket, then leave."""
    KataServer(sock).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

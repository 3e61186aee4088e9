"""One line on a terminal that says what the grader is doing while it works (which katas are
being graded, which one is timed), rewritten in place and erased before the table. Silent when
the stream is not a terminal, so logs and pipes get the table alone."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from judge.language import tr

TICK_SECONDS = 0.5  # the clock on the line moves even while a kata hangs


class StatusLine:
    def __init__(self, stream: TextIO, total: int, *, enabled: bool):
        self.stream, self.total, self.enabled = stream, total, enabled
        self.running: list[str] = []
        self.done = 0
        self.text = tr("starting...")
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        if enabled:
            threading.Thread(target=self.tick, daemon=True).start()

    def __call__(self, event: str, name: str) -> None:
        with self.lock:
            if event == "start":
                self.running.append(name)
            elif event == "done":
                self.done += 1
                if name in self.running:
                    self.running.remove(name)
            if event == "timing":
                self.text = tr("timing {name} against PyTorch...", name=name)
            else:
                self.text = tr(
                    "grading {names} ({done} of {total} done)",
                    names=", ".join(self.running) or "...",
                    done=self.done,
                    total=self.total,
                )
        self.show()

    def tick(self) -> None:
        while not self.stopped.wait(TICK_SECONDS):
            self.show()

    def show(self) -> None:
        if self.enabled and not self.stopped.is_set():
            with self.lock:
                line = tr("{text} {seconds:.0f} s", text=self.text, seconds=time.monotonic() - self.started)
                self.stream.write("\r\033[K" + line[:110])
                self.stream.flush()

    def above(self, text: str, out: TextIO | None = None) -> None:
        """Print `text` (to stdout) above the status line, which is drawn again at its next tick."""
        with self.lock:
            if self.enabled and not self.stopped.is_set():
                self.stream.write("\r\033[K")
                self.stream.flush()
            print(text, file=out or sys.stdout, flush=True)

    def clear(self) -> None:
        self.stopped.set()
        if self.enabled:
            with self.lock:
                self.stream.write("\r\033[K")
                self.stream.flush()

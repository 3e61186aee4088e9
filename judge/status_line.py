"""One line on a terminal that says what the grader is doing while it works (which katas are
being graded, which one is timed), rewritten in place and erased before the table. Silent when
the stream is not a terminal, so logs and pipes get the table alone."""

from __future__ import annotations

import threading
import time
from typing import TextIO

TICK_SECONDS = 0.5  # the clock on the line moves even while a kata hangs


class StatusLine:
    def __init__(self, stream: TextIO, total: int, *, enabled: bool):
        self.stream, self.total, self.enabled = stream, total, enabled
        self.running: list[str] = []
        self.done = 0
        self.text = "starting..."
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
                self.text = f"timing {name} against PyTorch..."
            else:
                self.text = f"grading {', '.join(self.running) or '...'} ({self.done} of {self.total} done)"
        self.show()

    def tick(self) -> None:
        while not self.stopped.wait(TICK_SECONDS):
            self.show()

    def show(self) -> None:
        if self.enabled and not self.stopped.is_set():
            with self.lock:
                line = f"{self.text} {time.monotonic() - self.started:.0f} s"
                self.stream.write("\r\033[K" + line[:110])
                self.stream.flush()

    def clear(self) -> None:
        self.stopped.set()
        if self.enabled:
            with self.lock:
                self.stream.write("\r\033[K")
                self.stream.flush()

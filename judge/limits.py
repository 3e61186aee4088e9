"""The limits a kata runs under: one place for all of them."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """time_limit: wall-clock seconds for a kata's whole run (its tests, or its timing).
    test_timeout: seconds one test may run, enforced from outside the kata's process.
    memory_mb: address space of a kata process on CPU-only runs (torch itself takes ~650 MB).
    output_mb: bytes a kata process may write to any file, its captured prints included."""

    time_limit: float = 60.0
    test_timeout: float = 20.0
    memory_mb: int = 4096
    output_mb: int = 64

    def timing_limit(self) -> float:
        """Wall-clock seconds for timing one kata (the rounds take a few seconds)."""
        return self.time_limit + 10


DEFAULT = Limits()

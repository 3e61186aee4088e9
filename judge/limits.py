"""The limits a kata runs under: one place for all of them."""

from dataclasses import dataclass, replace


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

    def at_least(self, *, time_limit: float | None = None, test_timeout: float | None = None) -> "Limits":
        """These limits, raised where a kata declares it needs more (a training kata, say)."""
        return replace(
            self,
            time_limit=max(self.time_limit, time_limit or 0),
            test_timeout=max(self.test_timeout, test_timeout or 0),
        )

    def timing_limit(self) -> float:
        """Wall-clock seconds for timing one kata (the rounds take a few seconds)."""
        return self.time_limit + 10


DEFAULT = Limits()


def limits_for(kata: str, limits: Limits) -> Limits:
    """`limits` raised to what info.toml declares the kata needs (`time_limit`, `test_timeout`:
    a kata that trains a model has longer tests); unchanged for a kata it does not list."""
    from judge.catalog import CatalogError, load_catalog

    try:
        entry = next((k for k in load_catalog() if k.name == kata), None)
    except CatalogError:  # reported by the commands that read the catalog; grade with the base limits
        return limits
    if entry is None:
        return limits
    return limits.at_least(time_limit=entry.time_limit, test_timeout=entry.test_timeout)

"""The limits a kata runs under: one place for all of them."""

import resource
from dataclasses import dataclass, replace
from functools import lru_cache


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


def limits_for(kata: str, limits: Limits, declared: dict | None = None) -> Limits:
    """`limits` raised to what info.toml declares the kata needs (`time_limit`, `test_timeout`:
    a kata that trains a model has longer tests); unchanged for a kata it does not list.
    `declared`: {kata: (time_limit, test_timeout)} to use instead of info.toml's (a test's)."""
    if declared is None:
        declared = _declared_limits(_catalog_version())
    time_limit, test_timeout = declared.get(kata, (None, None))
    return limits.at_least(time_limit=time_limit, test_timeout=test_timeout)


def declared_limits(katas) -> dict[str, tuple[int | None, int | None]]:
    """{kata: (time_limit, test_timeout)} for the catalog's katas that declare either."""
    return {k.name: (k.time_limit, k.test_timeout) for k in katas if k.time_limit or k.test_timeout}


def _catalog_version() -> int | None:
    from judge.paths import INFO

    try:
        return INFO.stat().st_mtime_ns
    except OSError:
        return None


@lru_cache(maxsize=1)
def _declared_limits(version: int | None) -> dict[str, tuple[int | None, int | None]]:
    """{kata: (time_limit, test_timeout)} from info.toml, read once per version of the file: a grade
    (each save in watch) costs a stat, not a parse and a catalog check."""
    from judge.catalog import CatalogError, load_catalog

    try:
        return declared_limits(load_catalog())
    except CatalogError:  # reported by the commands that read the catalog; grade with the base limits
        return {}


def apply_limits(memory_mb: int, output_mb: int, device: str) -> None:
    """Keep one kata from taking the machine down: this process's address space (`memory_mb`,
    only without CUDA, whose driver reserves far more virtual memory than it uses) and the
    bytes it may write to a file (`output_mb`); 0: no limit."""
    if memory_mb and (device == "cpu" or not _cuda_available()):
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    if output_mb:
        resource.setrlimit(resource.RLIMIT_FSIZE, (output_mb << 20, output_mb << 20))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()

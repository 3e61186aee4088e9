"""Timing a passing kata next to its PyTorch reference.

In the timing process (judge.plugin's timing mode), `measure` runs the spec's benchmark:
the kata in its kata process (sandboxed, what it forbids removed, as when it is graded) and
the reference in the timing process, on the same inputs, in interleaved rounds of
torch.utils.benchmark's blocked_autorange, the ratio taken within each round (this
machine's slow spells last longer than a round, so they hit both halves of a pair alike);
it reports the median per-round ratio. On the grader's side, `time_results` times each
passing kata in a process of its own, one at a time, so no kata's global changes reach
another's figures and no two timings compete for the cores.
"""

from __future__ import annotations

from judge.language import tr
from judge.testing.scenarios import scenario, world_scenario

MIN_RUN_TIME = 0.02  # seconds per blocked_autorange measurement
# One CPU thread for both sides: with two or more, every separate op of eager code pays a
# thread-pool handshake that a fused kernel pays once, and as soon as anything else runs on the
# machine that handshake waits for a busy core: measured, SDPA's reference solution read 1.2-1.7x
# at one thread whatever else ran, but 3-7x at two threads under load.
TIMING_THREADS = 1
# Above this spread of the per-round ratios (upper quartile / lower quartile - 1) the machine
# was too busy for the median to mean much: the table says so instead of showing a number.
UNRELIABLE_SPREAD = 0.25


def steady_allocator() -> None:
    """Fixed, generous malloc thresholds in this process (glibc; elsewhere nothing changes).
    By default glibc maps each big block afresh and hands it back when freed, by thresholds
    that move with the process's history, so a timing pays for page faults that come and go:
    measured on this 2-core machine, idle, rotary_embedding's rounds ranged 0.28x to 0.82x
    (the kata's call 6 to 31 ms from one round to the next) and the notice said "machine busy";
    with these thresholds on both sides, the call took 7.7 to 8.3 ms over the 18 rounds of two
    runs, and 6 katas called busy in a grade fell to 1 or 2. Both sides keep their blocks, so
    the timing measures the arithmetic, not the paging."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (the most glibc allows), fixed: not adjusted
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: free memory kept before trimming
    except (OSError, AttributeError):
        pass


def _middle(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _quartiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]


def _median(fn, threads: int) -> float:
    from torch.utils import benchmark as torch_benchmark

    timer = torch_benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median


_KATA_SIDE: dict = {}  # in the kata process: (benchmark, device) -> (the kata's call, its notes)


@scenario
def kata_side(kata, benchmark, device: str, threads: int, notes: bool = False) -> dict:
    """In the kata process, sandboxed and with what the kata forbids removed: the median time
    of the kata's call in the spec's benchmark (built, and warmed up, on the first round), and
    the benchmark's notes when asked. The kata's word, as every figure it reports is."""
    import torch

    key = (benchmark.__module__, benchmark.__qualname__, device)
    if key not in _KATA_SIDE:
        steady_allocator()
        kata_fn, _, *extra = benchmark(kata, device)
        with torch.no_grad():
            kata_fn()
        _KATA_SIDE[key] = (kata_fn, extra[0] if extra else None)
    kata_fn, notes_fn = _KATA_SIDE[key]
    torch.set_num_threads(threads)
    with torch.no_grad():
        median = _median(kata_fn, threads)
        if device == "cuda":
            torch.cuda.synchronize()
    return {"median": median, "notes": notes_fn() if notes and notes_fn else None}


@world_scenario
def world_side(implementation, benchmark, rounds: int, reference: bool) -> list[float]:
    """On every rank of a world (a distributed kata's benchmark: `benchmark.world_size` ranks):
    the seconds per call of the kata's call (or the reference's, in a world of the solution), in
    `rounds` rounds of `benchmark.number` calls; every rank makes the same calls (a collective
    needs them all), none is skipped by an adaptive timer."""
    import time

    import torch

    kata_fn, reference_fn, *_ = benchmark(implementation, "cpu")
    call = reference_fn if reference else kata_fn
    seconds = []
    with torch.no_grad():
        call()  # warm-up: the first message on each connection
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(benchmark.number):
                call()
            seconds.append((time.perf_counter() - start) / benchmark.number)
    return seconds


def measure_world(benchmark, kata, reference, *, rounds: int) -> dict:
    """measure() for a distributed kata: the kata's rounds in a world hosted by its kata
    process, the reference's in a world of the solution forked here, rank 0's figures."""
    kata_rounds = world_side(kata, benchmark.world_size, benchmark, rounds, False)[0]
    reference_rounds = world_side(reference, benchmark.world_size, benchmark, rounds, True)[0]
    return {"cpu": summary(list(zip(kata_rounds, reference_rounds)), threads=1)}


def summary(pairs: list[tuple[float, float]], threads: int | None) -> dict:
    """The timing of one device from its (kata, reference) seconds per round."""
    ratios = [k / r for k, r in pairs]
    low, high = _quartiles(ratios)
    spread = high / low - 1
    return {
        "median_s": _middle([k for k, _ in pairs]),
        "reference_median_s": _middle([r for _, r in pairs]),
        "ratio": _middle(ratios),
        "ratio_low": low,
        "ratio_high": high,
        "spread": round(spread, 4),
        "reliable": spread <= UNRELIABLE_SPREAD,
        "threads": threads,
    }


def measure(benchmark, kata, reference, devices: list[str], *, rounds: int, threads: int = TIMING_THREADS) -> dict:
    """{device: {median_s, reference_median_s, ratio, ratio_low, ratio_high, spread, reliable,
    threads[, notes]}} for the kata against its reference: ratio is the median per-round ratio,
    ratio_low/high its quartiles. The kata's side runs where `kata` lives (the kata process:
    kata_side), the reference's here, from the benchmark built with `reference` (the solution:
    the benchmark makes both calls, and this side uses the reference's), in alternating rounds
    at the same thread count. A benchmark may return a third callable (or None) giving
    {label: text} to report beside the times, measured in the kata process (the kata's word:
    the largest tensor it made, say), and a fourth, measured here on the reference's benchmark
    (a yardstick that needs no kata: a dense formula, or autograd, which a backward kata's
    process has removed)."""
    import torch

    if getattr(benchmark, "world_size", None):
        return measure_world(benchmark, kata, reference, rounds=rounds)
    steady_allocator()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        timing = {}
        for device in devices:
            _, reference_fn, *extra = benchmark(reference, device)
            with torch.no_grad():
                reference_fn()  # warm-up: lazy initialisation and caches
                pairs = []
                for _ in range(1 + rounds):  # the first round warms both sides up, and is dropped
                    kata_median = kata_side(kata, benchmark, device, threads)["median"]
                    pairs.append((kata_median, _median(reference_fn, threads)))
                pairs = pairs[1:]
            timing[device] = summary(pairs, threads if device == "cpu" else None)
            kata_notes, reference_notes = (list(extra) + [None, None])[:2]
            notes = kata_side(kata, benchmark, device, threads, notes=True)["notes"] if kata_notes else None
            notes = (notes or {}) | (reference_notes() if reference_notes else {})
            if notes:
                timing[device]["notes"] = {str(k): str(v) for k, v in notes.items()}
        return timing
    finally:
        torch.set_num_threads(before)


def format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_timing(timing: dict) -> str:
    if not timing:
        return ""
    if "error" in timing:
        return timing["error"]
    return "; ".join(format_device(device, t) for device, t in timing.items())


def format_device(device: str, t: dict) -> str:
    if not t.get("reliable", True):
        return tr(
            "{device}: machine busy, timing unreliable (ratios {low:.2f}x to {high:.2f}x across rounds); "
            "try again when it is idle",
            device=device,
            low=t["ratio_low"],
            high=t["ratio_high"],
        )
    threads = ""
    if t.get("threads"):
        threads = ", " + (tr("1 thread") if t["threads"] == 1 else tr("{count} threads", count=t["threads"]))
    return (
        f"{device} {t['ratio']:.2f}x ({format_seconds(t['median_s'])} vs {format_seconds(t['reference_median_s'])}"
        + threads
        + ")"
        + "".join(f", {label} {text}" for label, text in t.get("notes", {}).items())
    )

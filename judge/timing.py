"""Timing a passing kata next to its PyTorch reference.

In the kata process (judge.plugin's timing mode), `measure` runs the spec's benchmark:
the kata and the reference on the same inputs, in interleaved rounds of
torch.utils.benchmark's blocked_autorange, the ratio taken within each round (this
machine's slow spells last longer than a round, so they hit both halves of a pair alike);
it reports the median per-round ratio. On the grader's side, `time_results` times each
passing kata in a process of its own, one at a time, so no kata's global changes reach
another's figures and no two timings compete for the cores.
"""

from __future__ import annotations

from judge.language import tr

MIN_RUN_TIME = 0.02  # seconds per blocked_autorange measurement
# One CPU thread for both sides: with two or more, every separate op of eager code pays a
# thread-pool handshake that a fused kernel pays once, and as soon as anything else runs on the
# machine that handshake waits for a busy core: measured, SDPA's reference solution read 1.2-1.7x
# at one thread whatever else ran, but 3-7x at two threads under load.
TIMING_THREADS = 1
# Above this spread of the per-round ratios (upper quartile / lower quartile - 1) the machine
# was too busy for the median to mean much: the table says so instead of showing a number.
UNRELIABLE_SPREAD = 0.25


def _middle(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _quartiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]


def measure(benchmark, kata_module, devices: list[str], *, rounds: int, threads: int = TIMING_THREADS) -> dict:
    """{device: {median_s, reference_median_s, ratio, ratio_low, ratio_high, spread, reliable,
    threads[, notes]}} for the kata against its reference: ratio is the median per-round ratio,
    ratio_low/high its quartiles. A benchmark may return a third callable, giving {label: text}
    to report beside the times (a peak memory next to a naive implementation's, say)."""
    import torch
    from torch.utils import benchmark as torch_benchmark

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:

        def median(fn) -> float:
            timer = torch_benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
            return timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median

        timing = {}
        for device in devices:
            kata_fn, reference_fn, *extra = benchmark(kata_module, device)
            with torch.no_grad():
                kata_fn(), reference_fn()  # warm-up: lazy initialisation and caches
                if device == "cuda":
                    torch.cuda.synchronize()
                pairs = [(median(kata_fn), median(reference_fn)) for _ in range(rounds)]
            ratios = [k / r for k, r in pairs]
            low, high = _quartiles(ratios)
            spread = high / low - 1
            timing[device] = {
                "median_s": _middle([k for k, _ in pairs]),
                "reference_median_s": _middle([r for _, r in pairs]),
                "ratio": _middle(ratios),
                "ratio_low": low,
                "ratio_high": high,
                "spread": round(spread, 4),
                "reliable": spread <= UNRELIABLE_SPREAD,
                "threads": threads if device == "cpu" else None,
            }
            if extra:
                timing[device]["notes"] = {str(k): str(v) for k, v in extra[0]().items()}
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

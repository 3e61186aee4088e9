"""One kata's tests split over several judging processes (shards), and their runs put back together.

Shard i of n runs the collected tests i, i+n, i+2n, ... (after the core-first order and the
cases this machine cannot run are settled, identically in every shard), each in a grade of
its own: its own judging process, kata process, limits and results file. `combine` turns
the shards' runs back into the events and the end of one run, so verdicts.classify reads
what one process running every test would have written:

    run 0 collected a, c    run 1 collected b, d    ->  collected a, b, c, d
    the reports, in that order; a finish only if every shard finished;
    the end that decides: a shard that ended abnormally, else one whose tests failed, else shard 0's.
"""

from __future__ import annotations

from dataclasses import replace

from judge.isolation import ProcessEnd
from judge.protocol import Collected, Event, Finish, TestReport

NOTHING_COLLECTED = 5  # pytest's exit status when no test was selected (a shard of a kata with few tests)


def option(index: int, count: int) -> str:
    """The plugin's --shard value for shard `index` of `count`."""
    return f"{index}/{count}"


def parse(text: str) -> tuple[int, int]:
    """(index, count) from an --shard value; ValueError if it is not "i/n" with 0 <= i < n."""
    index, _, count = text.partition("/")
    index_, count_ = int(index), int(count)
    if not 0 <= index_ < count_:
        raise ValueError(f"--shard {text}: expected i/n with 0 <= i < n")
    return index_, count_


def select(items: list, index: int, count: int) -> list:
    """The tests shard `index` of `count` runs."""
    return items[index::count]


def combine(runs: list[tuple[list[Event], ProcessEnd]]) -> tuple[list[Event], int]:
    """(the events as one run would have written them, the index of the run whose end and log
    decide). A deciding run that collected nothing stands alone: its verdict (a crash before
    the tests, a load or collection error) is the kata's."""
    decider = _deciding(runs)
    collected = [_first(events, Collected) for events, _ in runs]
    if collected[decider] is None or any(c is None for c in collected):
        return runs[decider][0], decider
    order = _interleaved([list(c.tests) for c in collected])
    tests: dict[str, str] = {}
    for c in collected:
        tests.update(c.tests)
    merged = Collected(
        tests={nodeid: tests[nodeid] for nodeid in order},
        unavailable={k: v for c in collected for k, v in c.unavailable.items()},
        tiers={k: v for c in collected for k, v in c.tiers.items()},
    )
    reports: dict[str, TestReport] = {}
    for events, _ in runs:
        for event in events:
            if isinstance(event, TestReport):
                reports.setdefault(event.nodeid, event)
    out: list[Event] = [merged, *(reports[nodeid] for nodeid in order if nodeid in reports)]
    finishes = [_first(events, Finish) for events, _ in runs]
    if all(f is not None for f in finishes):
        worst = max(finishes, key=lambda f: f.exitstatus not in (0, NOTHING_COLLECTED))
        out.append(replace(worst, stopped=any(f.stopped for f in finishes)))
    return out, decider


def _deciding(runs: list[tuple[list[Event], ProcessEnd]]) -> int:
    """The run whose end speaks for all: the first that ended abnormally (killed at a limit,
    orphaned, a signal or an unexpected exit status, or no finish written), else the first
    whose tests failed (exit status 1), else the first."""

    def severity(run: tuple[list[Event], ProcessEnd]) -> int:
        events, end = run
        code = end.returncode
        if end.orphaned or end.timed_out or end.overran is not None or end.importing or code is None:
            return 3
        if code not in (0, 1, NOTHING_COLLECTED) or _first(events, Finish) is None:
            return 2
        return 1 if code == 1 else 0

    ranks = [severity(run) for run in runs]
    return ranks.index(max(ranks))


def _first(events: list[Event], kind: type) -> Event | None:
    return next((e for e in events if isinstance(e, kind)), None)


def _interleaved(lists: list[list[str]]) -> list[str]:
    """The shards' tests back in the order they were collected in (shard i had i, i+n, ...)."""
    out = []
    for j in range(max((len(x) for x in lists), default=0)):
        out += [x[j] for x in lists if j < len(x)]
    return out

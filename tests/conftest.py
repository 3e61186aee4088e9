"""The kata tests' pytest wiring is the judge's own plugin (judge/plugin.py): the options
(--impl, --seed, --device and the grader's), the fixtures (kata, rng, gen, seed,
other_device), the torch-state guard and the results file. The maintainers' suite also
grades mutants, variants, stubs and broken files in the background (tests/pool.py)."""

import gc
from pathlib import Path

import pytest
from pool import POOL

from judge import plugin
from judge.paths import TESTS
from judge.plugin import *  # noqa: F403 - pytest finds the plugin's hooks and fixtures here


def pytest_configure(config):
    """The plugin's configuration; then, for a run of the whole suite (make test), the pool's
    first fork servers start, to import while pytest collects (tests/pool.py, WARM_LANES)."""
    plugin.pytest_configure(config)
    config.addinivalue_line("markers", "waits: the test mostly waits (a timer, idle ranks): its core grades")
    whole = any(Path(arg.split("::")[0]).resolve() == TESTS for arg in config.args)
    if whole and suite(config) and not config.option.collectonly:
        POOL.warm_up()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test marked `waits` lends its core to the pool while it runs (tests/pool.py)."""
    if item.get_closest_marker("waits") is None:
        yield
        return
    with POOL.lent():
        yield


def pytest_unconfigure(config):
    POOL.close_warm()  # a run that ended before the pool started
    if suite(config):
        gc.freeze()  # nor does the teardown: it took 1-2 s, on one core, with nothing else left to run


def suite(config) -> bool:
    """Whether this is the maintainers' suite, not a grade's judging process, which loads this
    file too (the kata's tests live here): there a kata may look through gc.get_objects(), as
    tests/broken/causal_mask/writes_the_results_file does, and must find what it would find."""
    return config.getoption("results") is None and config.getoption("template") is None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: only the chosen tests' grades
def pytest_collection_modifyitems(session, config, items):
    """The plugin's ordering and selection first; then the tests that read verdicts from the
    pool move after all the others, their modules' grading plans are gathered, and the pool
    starts at once."""
    plugin.pytest_collection_modifyitems(session, config, items)
    planned: dict = {}
    for item in items:
        plan = getattr(item.module, "grading_plan", None)
        if plan is not None:
            planned.setdefault(item.module, (plan, []))[1].append(item)
    for plan, chosen in planned.values():
        for batch in plan(chosen, config):
            POOL.add(batch)
    if suite(config):
        # What lives now (torch, the test modules, their cases) lives to the end: the full
        # collections to come need not walk it (11 in a run walked it, 1.6 s of CPU)
        gc.freeze()
    if planned:
        items.sort(key=lambda item: item.module in planned)  # stable: the others first, in their order
        if not config.option.collectonly:
            POOL.start()

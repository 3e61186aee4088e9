"""The kata tests' pytest wiring is the judge's own plugin (judge/plugin.py): the options
(--impl, --seed, --device and the grader's), the fixtures (kata, rng, gen, seed,
other_device), the torch-state guard and the results file. The maintainers' suite also
grades mutants, variants, stubs and broken files in the background (tests/pool.py)."""

import pytest
from pool import POOL

from judge import plugin
from judge.plugin import *  # noqa: F403 - pytest finds the plugin's hooks and fixtures here


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
    if planned:
        items.sort(key=lambda item: item.module in planned)  # stable: the others first, in their order
        if not config.option.collectonly:
            POOL.start()

"""The kata tests' pytest wiring is the judge's own plugin (judge/plugin.py): the options
(--impl, --seed, --device and the grader's), the fixtures (kata, rng, gen, seed,
other_device), the torch-state guard and the results file."""

from judge.plugin import *  # noqa: F403 - pytest finds the plugin's hooks and fixtures here

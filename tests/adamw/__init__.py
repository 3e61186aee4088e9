"""adamw's tests, by concern: the math (test_steps.py) and the conventions
(test_conventions.py); what they share, the SPEC, the stories and the reference included, is
in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

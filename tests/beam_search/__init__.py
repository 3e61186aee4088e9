"""beam_search's tests, by concern: the search against HF's and its properties (test_search.py);
what they share, the SPEC included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

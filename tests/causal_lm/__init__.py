"""causal_lm's tests, by concern: one full pass, its loss and gradients (test_forward.py),
decoding in pieces with the cache (test_decoding.py), generation (test_generation.py),
training (test_training.py) and the conventions (test_conventions.py); what they share, the
SPEC, the reference and the scenarios included, is in common.py, the checks in judging.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

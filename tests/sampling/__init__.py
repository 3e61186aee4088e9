"""sampling's tests, by concern: filter_logits (test_filter_logits.py) and sample_next_token
(test_sample_next_token.py); what they share, the SPEC included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

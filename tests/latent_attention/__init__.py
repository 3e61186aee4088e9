"""latent_attention's tests, by concern: what they share (the SPEC, the case table, the float64
reference, the decoding story and its checks) is in common.py; the math in test_math.py, the
conventions in test_conventions.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

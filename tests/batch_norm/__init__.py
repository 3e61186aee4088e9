"""batch_norm's tests, by concern: the story of calls against nn.BatchNorm1d/2d/3d
(test_story.py) and the conventions (test_conventions.py); what they share, the SPEC, the
scenarios, the references, the tolerances and the checks, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

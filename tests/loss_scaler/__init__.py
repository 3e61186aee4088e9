"""loss_scaler's tests, by concern: the training story against GradScaler step by step
(test_story.py, the core) and the conventions: argument checks, unscale_ twice, step's
arguments and result, state_dict round trips, float64 throughout (test_conventions.py); what
they share, the SPEC, the story's scenario, its GradScaler twin and the tolerances, is in
common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

"""zero_sharded_optimizer's tests, by concern: the training against the unsharded optimizer and
where the state lives (test_training.py), the conventions (test_conventions.py); what they
share, the SPEC, the models, the stories, the scenario and the reference included, is in
common.py, the checks and the replays in judging.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

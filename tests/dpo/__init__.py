"""dpo's tests, by concern: sequence_log_probs (test_sequence_log_probs.py), dpo_loss
(test_dpo_loss.py), the gradients of both and end to end (test_gradients.py), and the
conventions both share: devices, inputs left alone, the float64 rule (test_conventions.py);
what they share, the SPEC included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

"""ppo's tests, by concern: gae (test_gae.py), ppo_clip_loss (test_ppo_clip_loss.py), and
the conventions both share: devices, inputs left alone, the float64 rule (test_conventions.py);
what they share, the SPEC included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

"""lora's tests, by concern: forward and its gradients (test_forward.py), the fresh module's
initialisation, its frozen base and its arguments (test_fresh.py), the dropout on the low-rank
branch (test_dropout.py) and the merge() and unmerge() story (test_merge.py); what they share,
the SPEC, the reference, the recipes and the scenarios included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

"""layer_norm's tests, by concern: the forward against F.layer_norm (test_forward.py), the
hand-written backward against autograd through it (test_gradients.py), and the conventions
(test_conventions.py); what they share, the SPEC, the references, the tolerances and the
checks included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

"""moe's tests, by concern: the layer's values, gradients, parameters and arguments
(test_layer.py), its sparsity (test_sparsity.py), load_balancing_loss (test_loss.py), and half
precision and the float64 rule for both (test_precision.py); what they share, the SPEC, the
references, the tolerances and the checks included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

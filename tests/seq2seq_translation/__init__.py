"""seq2seq_translation's tests, by concern: the forward's properties and conventions
(test_model.py), loss_fn and greedy_decode (test_loss_and_decoding.py), train() against a
reference loop and the training run (test_training.py); what they share, the SPEC, the
reference model and loop and the model's scenarios included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

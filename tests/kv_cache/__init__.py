"""kv_cache's tests, by concern: the KVCache on its own (test_cache.py) and the
CachedSelfAttention decoding through it (test_attention.py); what they share, the SPEC, the
reference and the scenarios included, is in common.py."""

from .common import SPEC  # noqa: F401 - the kata's spec, for the grader and tests/test_engine.py

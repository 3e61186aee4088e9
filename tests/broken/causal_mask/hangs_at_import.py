"""Broken causal_mask: loops forever at import, outside any function. Expected verdict: timeout,
saying the import hung (issue 15, friction 3)."""

while True:
    pass

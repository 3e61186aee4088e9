"""A causal_mask that sleeps past any limit. The limits count wall-clock time too, so it is
stopped as a spinning one is, and it burns no CPU meanwhile (the suite's pool grades on that
core)."""

from pathlib import Path

SLEEPS = "def causal_mask(seq_len, *, device=None):\n    import time\n\n    time.sleep(3600)\n"


def sleeper(folder: Path) -> Path:
    """`folder`/causal_mask.py, the kata that sleeps (the folder made if need be)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "causal_mask.py"
    path.write_text(SLEEPS)
    return path

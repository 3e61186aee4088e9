"""Broken causal_mask: wrong, and at import it writes a module into torch's package directory (in the venv's site-packages) whose assert_close passes everything, then names it as its result class's __module__, hoping the judge imports it. Expected verdict: error: the package directory cannot be written."""
from pathlib import Path

import torch

(Path(torch.__file__).parent / "_planted_by_a_kata.py").write_text(
    "def assert_close(*args, **kwargs):\n    return None\n", encoding="utf-8"
)


class Mask(torch.Tensor):
    __module__ = "torch._planted_by_a_kata"


def causal_mask(seq_len, *, device=None):
    return torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device).as_subclass(Mask)

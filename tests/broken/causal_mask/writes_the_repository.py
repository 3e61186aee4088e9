"""Broken causal_mask: wrong, and at import it finds the repository (the folder of grader.py on its sys.path) and writes a file into its tests/. Expected verdict: error: only its private temp dir can be written."""
import sys
from pathlib import Path

import torch

for entry in sys.path:
    if (Path(entry) / "grader.py").is_file():
        (Path(entry) / "tests" / "written_by_a_kata.py").write_text("PLANTED = True\n", encoding="utf-8")


def causal_mask(seq_len, *, device=None):
    return torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device)

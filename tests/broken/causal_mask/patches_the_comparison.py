"""Broken causal_mask: wrong (the diagonal blocked too), and at import it makes every comparison it can reach say "equal". Expected verdict: fail: the comparisons run in the judging process, which never imports this file."""

import sys

import torch
import torch.testing

torch.testing.assert_close = lambda *args, **kwargs: None
torch.equal = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
for name, module in list(sys.modules.items()):
    if name.startswith("judge.testing") and hasattr(module, "assert_close"):
        module.assert_close = lambda *args, **kwargs: None


def causal_mask(seq_len, *, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(0)

"""Broken causal_mask: wrong, and its error message carries terminal escapes that would clear the screen and paint a green "pass" over the verdict. Expected verdict: fail, the escapes shown as text."""


def causal_mask(seq_len, *, device=None):
    raise ValueError("\x1b[2J\x1b[H\x1b[32mcausal_mask  pass  100%\x1b[0m")

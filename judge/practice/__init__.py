"""The practice loop around the grader, one module per command: watch, hint, reset, diff,
mock, progress (cli parses their arguments). They use the engine; it never uses them."""

#!/usr/bin/env python3
"""Grade the Transformer katas: the entry point of `make grade` and `make check`.

    python grader.py [--impl katas|solutions|DIR|FILE] [--kata NAME]... [--device cpu|cuda|auto]
                     [--no-timing] [--json FILE] [--seed N] [--jobs N] [--time-limit S]
                     [--test-timeout S] [--engine auto|fork|process]
    python grader.py stubs [--write]     (maintainers: katas/ generated from solutions/)
    python grader.py table               (the README's kata table, from info.toml)
    python grader.py costs               (maintainers: each kata test's cost, tests/costs.json)

Each kata's tests run in a process of their own, in their own process group, under a
wall-clock limit and a per-test limit enforced from outside, so one kata's hang or crash
cannot stop the others. Outcomes come back through a file the grader owns, never through
the kata's output. Passing katas are then timed against their PyTorch reference, one at a
time, each in a process of its own. The work is done by the judge package (judge/).

Exit status: 0 when every graded kata passes, 1 otherwise, 2 when the grader could not run.
"""

import sys

from judge.grading import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

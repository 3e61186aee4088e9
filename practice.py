#!/usr/bin/env python3
"""The practice loop around the grader: the entry point of make watch, hint, reset, diff,
mock and progress.

    python practice.py watch    [--kata NAME] [--seed N] [--device cpu|cuda|auto] [--no-timing] [--engine E]
    python practice.py hint     --kata NAME
    python practice.py reset    --kata NAME
    python practice.py diff     --kata NAME
    python practice.py mock     [--n 3] [--minutes M] [--seed N] [--no-timing] [--engine E]
    python practice.py progress

Where things live: the learner's kata files in katas/ (or $KATAS_DIR), the learner's state
in .katas/ (or $KATAS_STATE, git-ignored): history.jsonl (append-only, one JSON record a
line), hints.json (hints used per kata), attempts/<kata>/<timestamp>.py (what `reset`
kept) and mock/<timestamp>/ (one folder per mock interview: its stubs, its plan, its
hints and its report). The commands live in judge/practice/, one module each.

Exit status: 0 on success (a mock that ran to its report is a success, whatever its
verdicts), 1 when `diff` finds that the kata does not pass, 2 on bad input (one line).
"""

import sys

from judge.practice.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

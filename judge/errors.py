"""Errors the commands report to the learner."""


class UsageError(Exception):
    """Bad input to a command: reported on one line, exit status 2."""

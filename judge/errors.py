"""Errors the commands report to the learner."""

from __future__ import annotations

import re

from judge.language import tr


class UsageError(Exception):
    """Bad input to a command: reported on one line, exit status 2."""


# argparse's own messages (Python 3.11 to 3.13), matched as it words them and said again
# through tr(): a learner who reads Chinese reads them in Chinese too. The last one carries
# the messages of our own argument types, already in the learner's language.
_ARGPARSE = (
    (r"unrecognized arguments: (?P<args>.*)", lambda found: tr("unrecognized arguments: {args}", **found)),
    (
        r"the following arguments are required: (?P<names>.*)",
        lambda found: tr("the following arguments are required: {names}", **found),
    ),
    (
        r"argument (?P<name>\S+): invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)",
        lambda found: tr("argument {name}: invalid choice: {value} (choose from {choices})", **found),
    ),
    (
        r"argument (?P<name>\S+): invalid (?P<kind>\w+) value: (?P<value>.*)",
        lambda found: tr("argument {name}: invalid {kind} value: {value}", **found),
    ),
    (
        r"argument (?P<name>\S+): expected one argument",
        lambda found: tr("argument {name}: expected one argument", **found),
    ),
    (
        r"argument (?P<name>\S+): ignored explicit argument (?P<value>.*)",
        lambda found: tr("argument {name}: ignored explicit argument {value}", **found),
    ),
    (r"argument (?P<name>\S+): (?P<message>.*)", lambda found: tr("argument {name}: {message}", **found)),
)


def usage_error(message: str, command: str) -> UsageError:
    """argparse's error `message` for `command` (say, "python grader.py"), in the learner's
    language, with where to read the command's options."""
    for pattern, said in _ARGPARSE:
        if match := re.fullmatch(pattern, message, flags=re.DOTALL):
            message = said(match.groupdict())
            break
    return UsageError(tr("{message} (see: {command} --help)", message=message, command=command))

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
    (r"unrecognized arguments: (?P<args>.*)", "unrecognized arguments: {args}"),
    (r"the following arguments are required: (?P<names>.*)", "the following arguments are required: {names}"),
    (
        r"argument (?P<name>\S+): invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)",
        "argument {name}: invalid choice: {value} (choose from {choices})",
    ),
    (
        r"argument (?P<name>\S+): invalid (?P<kind>\w+) value: (?P<value>.*)",
        "argument {name}: invalid {kind} value: {value}",
    ),
    (r"argument (?P<name>\S+): expected one argument", "argument {name}: expected one argument"),
    (
        r"argument (?P<name>\S+): ignored explicit argument (?P<value>.*)",
        "argument {name}: ignored explicit argument {value}",
    ),
    (r"argument (?P<name>\S+): (?P<message>.*)", "argument {name}: {message}"),
)


def usage_error(message: str, command: str) -> UsageError:
    """argparse's error `message` for `command` (say, "python grader.py"), in the learner's
    language, with where to read the command's options."""
    for pattern, template in _ARGPARSE:
        if match := re.fullmatch(pattern, message, flags=re.DOTALL):
            message = tr(template, **match.groupdict())
            break
    return UsageError(tr("{message} (see: {command} --help)", message=message, command=command))

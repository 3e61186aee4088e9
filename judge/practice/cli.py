"""The practice commands' command line (practice.py is its entry point).

    python practice.py watch    [--kata NAME] [--seed N] [--device cpu|cuda|auto] [--no-timing] [--engine E]
    python practice.py hint     --kata NAME
    python practice.py reset    --kata NAME
    python practice.py diff     --kata NAME
    python practice.py mock     [--n 3] [--minutes M] [--seed N] [--no-timing] [--engine E]
    python practice.py interview --kata NAME [--minutes M] [--seed N] [--no-timing] [--engine E]
    python practice.py progress
    python practice.py next

Empty option values count as not given, so the Makefile can pass `--kata "$(KATA)"`
whether KATA is set or not. Exit status: 0 on success (a mock that ran to its report is a
success, whatever its verdicts), 1 when `diff` finds that the kata does not pass, 2 on
bad input (one line).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys

from judge.environment import require_grading_dependencies
from judge.errors import UsageError, usage_error
from judge.language import tr
from judge.places import Places
from judge.practice.diff import diff_command
from judge.practice.hint import hint_command
from judge.practice.mock import interview_command, mock_command
from judge.practice.next import next_command
from judge.practice.progress import progress_command
from judge.practice.reset import reset_command
from judge.practice.watch import POLL_SECONDS, watch_command


class PracticeArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise usage_error(message, "python practice.py")


def optional_int(what: str, minimum: int):
    def parse(text: str) -> int | None:
        if text.strip() == "":
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                tr("{what} must be a whole number, got {text!r}", what=what, text=text)
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                tr("{what} must be at least {minimum}, got {value}", what=what, minimum=minimum, value=value)
            )
        return value

    return parse


def optional_minutes(text: str) -> float | None:
    if text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(tr("MINUTES must be a number of minutes, got {text!r}", text=text)) from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(tr("MINUTES must be more than 0, got {text!r}", text=text))
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            tr("--interval must be a number of seconds, got {text!r}", text=text)
        ) from None
    if not 0 < value < 60:
        raise argparse.ArgumentTypeError(tr("--interval must be between 0 and 60 seconds, got {text!r}", text=text))
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = PracticeArgumentParser(
        prog="practice.py",
        description="The practice loop: watch, hint, reset, diff, mock, interview, next, progress.",
        epilog="Learner state: .katas/ (or $KATAS_STATE); kata files: katas/ (or $KATAS_DIR).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=PracticeArgumentParser)
    commands.required = True

    def kata_option(sub, required_text: str):
        sub.add_argument("--kata", default="", metavar="NAME", help=required_text)

    def engine_options(sub):
        sub.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu", help="where the tests run")
        sub.add_argument(
            "--engine",
            choices=("auto", "fork", "process"),
            default="auto",
            help="fork: grade in forked children of one warm process (default on Linux); "
            "process: a fresh process per grade",
        )
        sub.add_argument("--no-timing", action="store_true", help="skip the time vs PyTorch of passing katas")
        sub.add_argument("--interval", type=positive_seconds, default=POLL_SECONDS, help="seconds between polls")

    watch = commands.add_parser("watch", help="re-grade each kata you save")
    kata_option(watch, "watch only this kata (default: all of them)")
    watch.add_argument(
        "--next", action="store_true", help="follow your path: after a pass, watch its next kata (judge.learning)"
    )
    watch.add_argument("--seed", type=optional_int("SEED", 0), default=None)
    engine_options(watch)

    for name, text in (
        ("hint", "show one more hint"),
        ("reset", "keep your attempt, restore the stub"),
        ("diff", "your file against the reference, then grade it"),
    ):
        sub = commands.add_parser(name, help=text)
        kata_option(sub, "the kata (required)")
        if name == "diff":
            sub.add_argument("--seed", type=optional_int("SEED", 0), default=None)
            sub.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")

    mock = commands.add_parser("mock", help="a timed mock interview")
    mock.add_argument("--n", type=optional_int("N", 1), default=None, help="how many katas (default 3)")
    mock.add_argument(
        "--minutes",
        type=optional_minutes,
        default=None,
        help="time allowed in all (default: the katas' suggested minutes added up)",
    )
    mock.add_argument("--seed", type=optional_int("SEED", 0), default=None, help="repeat a mock's choice of katas")
    engine_options(mock)

    interview = commands.add_parser("interview", help="one kata from a bare stub, timed, the math graded")
    kata_option(interview, "the kata (required)")
    interview.add_argument(
        "--minutes", type=optional_minutes, default=None, help="time allowed (default: the kata's suggested minutes)"
    )
    interview.add_argument("--seed", type=optional_int("SEED", 0), default=None)
    engine_options(interview)

    commands.add_parser("next", help="the next kata of your path, or the review that is due")
    commands.add_parser("progress", help="best score, attempts, mock times and trend per kata")
    args = parser.parse_args(argv)
    if args.command == "mock" and args.n is None:
        args.n = 3
    return args


GRADING_COMMANDS = ("watch", "diff", "mock", "interview")
COMMANDS = {
    "watch": watch_command,
    "hint": hint_command,
    "reset": reset_command,
    "diff": diff_command,
    "mock": mock_command,
    "interview": interview_command,
    "progress": progress_command,
    "next": next_command,
}


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # `kill`, a closed terminal or tmux pane


def stop_as_on_ctrl_c() -> None:
    """SIGTERM and SIGHUP stop a grading command as Ctrl-C does, so it cleans up: the grade
    standing by for the next save (its folder in the temporary directory), a mock's report.
    Left to their default, they ended the process on the spot and left the folder behind. The
    judge's forked processes get the default back: a kata that signals itself is graded alike
    wherever it was forked from."""

    def interrupt(number, frame):
        raise KeyboardInterrupt

    def defaults() -> None:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_DFL)

    for number in STOP_SIGNALS:
        signal.signal(number, interrupt)
    os.register_at_fork(after_in_child=defaults)


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        if args.command in GRADING_COMMANDS:
            require_grading_dependencies()
            stop_as_on_ctrl_c()
        return COMMANDS[args.command](args, Places.default())
    except UsageError as error:
        print(tr("{command}: error: {message}", command="practice.py", message=error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\n" + tr("Stopped. Bye!"), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

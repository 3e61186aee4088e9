"""SIGTERM and SIGHUP stop a command as Ctrl-C does (judge.stopping): its `finally` blocks run, so
the grade a watch keeps standing by leaves no folder behind; a process forked from it later
still ends at once."""

import signal
import subprocess
import sys
import textwrap

import pytest

from judge.paths import ROOT

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from judge.stopping import stop_as_ctrl_c
    ending = int(sys.argv[2])
    stop_as_ctrl_c()
    ready, told = os.pipe()
    child = os.fork()
    if child == 0:  # forked later: the default action ends it, nothing is raised
        try:
            os.write(told, b"x")  # (a signal that comes while fork returns is lost: told when set)
            time.sleep(30)
        finally:
            print("the child cleaned up", flush=True)
            os._exit(0)
    try:
        os.read(ready, 1)
        os.kill(child, ending)
        _, status = os.waitpid(child, 0)
        print("child ended by signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
        os.kill(os.getpid(), ending)
        time.sleep(30)
    except KeyboardInterrupt:
        print("stopped as by Ctrl-C", flush=True)
    finally:
        print("cleaned up", flush=True)
""")


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_kill_or_a_closed_terminal_stops_the_command_as_ctrl_c_does(ending):
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(int(ending))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.stdout.splitlines() == [
        f"child ended by signal {int(ending)}",
        "stopped as by Ctrl-C",
        "cleaned up",
    ], run.stdout + run.stderr

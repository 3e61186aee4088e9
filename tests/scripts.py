"""A script of a test, run in a fresh Python: the fork engine forks, which the suite's own
process (threads of its pool running) must not do."""

import json
import subprocess
import sys

from judge.paths import ROOT


def run_script(script: str, *args: str, timeout: float = 300):
    """`python -c script ROOT *args` in the repository; what it printed, read as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)

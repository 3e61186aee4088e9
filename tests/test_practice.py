"""The practice loop (practice.py): watch, hint, reset, diff, mock, progress and the history.

Learner state and kata files live under tmp_path (Places, or KATAS_DIR / KATAS_STATE for
subprocesses), so these tests never touch katas/ or .katas/. Most tests drive the
functions with a fake engine and an injected clock; the real engines are checked where
it matters: the forked one in a fresh process (as `make watch` runs it: a process that
never ran a tensor op), the one-process-per-grade one through `practice.py diff`.
"""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sleeper import SLEEPS

from judge.catalog import load_catalog
from judge.history import History, history_of, record_check
from judge.paths import ROOT
from judge.places import Places
from judge.practice import cli, diff, hint, mock, progress, reset, watch
from judge.protocol import KataResult
from judge.stubs import make_stub, reference_text

CATALOG = load_catalog()
NAMES = [k.name for k in CATALOG]
SOLUTION = (ROOT / "solutions" / "causal_mask.py").read_text()
STUB = make_stub(SOLUTION)
WRONG = SOLUTION.replace("diagonal=1", "diagonal=0")  # blocks the diagonal too


def run_practice(*args: str, tmp_path: Path, timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    env = dict(os.environ, KATAS_DIR=str(tmp_path / "katas"), KATAS_STATE=str(tmp_path / "state"), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, str(ROOT / "practice.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **popen,
    )


@pytest.fixture
def places(tmp_path) -> Places:
    """A learner's checkout in miniature: fresh stubs in katas/, empty state."""
    katas = tmp_path / "katas"
    katas.mkdir()
    for name in NAMES:
        (katas / f"{name}.py").write_text(make_stub((ROOT / "solutions" / f"{name}.py").read_text()))
    return Places(katas, tmp_path / "state")


class FakeEngine:
    """Grades by content: the reference solution passes, the stub is todo, anything else fails."""

    kind = "fake"

    def __init__(self):
        self.graded: list[tuple[str, Path]] = []

    def prepare(self):
        pass

    def grade(self, name: str, path: Path, seed: int) -> KataResult:
        self.graded.append((name, path))
        text = path.read_text()
        solution = (ROOT / "solutions" / f"{name}.py").read_text()
        if text in (solution, reference_text(solution)):
            return KataResult(name, "pass", 1.0, 4, 4, "all 4 tests passed")
        if text == make_stub(solution):
            return KataResult(name, "todo", 0.0, 0, 4, "not started: the stub still raises NotImplementedError")
        failure = {"name": "matches the reference", "message": f"{name}(3) returned a wrong mask"}
        return KataResult(name, "fail", 0.5, 2, 4, "2 of 4 tests failed", [failure])

    def time(self, result, path):
        result.timing = {"cpu": {"median_s": 1e-4, "reference_median_s": 2e-4, "ratio": 0.5, "threads": 1}}


class FakeClock:
    """now() and sleep() for a mock interview that takes no real time; `at` schedules the
    learner's saves: {seconds after the start: callable}."""

    def __init__(self, start: float = 1_800_000_000.0):
        self.t, self.start, self.at = start, start, {}

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        for when in sorted(self.at):
            if self.t - self.start >= when:
                self.at.pop(when)()


# --------------------------------------------------------------------------- watch


WATCH_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from judge import engines
    from judge.history import History
    from judge.limits import Limits
    from judge.practice import watch
    folder, solution, wrong, broken = Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    target = folder / "causal_mask.py"
    engine = engines.ForkEngine(device="cpu", limits=Limits(test_timeout=60), shards=2)  # as make watch on 2 cores
    engine.prepare()
    watcher = watch.Watcher(engine, folder, ["causal_mask"], seed=5,
                               history=History(folder / "history.jsonl"), timing=False)
    out = {"kind": engine.kind, "prepare_s": engine.prepare_seconds, "unchanged": [r.status for r in watcher.poll()]}
    def save(text, key):
        target.write_text(text)
        start = time.perf_counter()
        results = watcher.poll()
        out[key] = [(r.status, r.message) for r in results]
        out[key + "_s"] = time.perf_counter() - start
        return results
    passed = save(Path(solution).read_text(), "solution")
    engine.time(passed[0], target)
    out["timing"] = passed[0].timing
    os.utime(target)  # touched, content unchanged: nothing to grade
    out["touched"] = [r.status for r in watcher.poll()]
    save(Path(wrong).read_text(), "wrong")
    engine.limits = Limits(time_limit=1, test_timeout=60)  # the wall-clock limit, for the endless loop only
    save(Path(broken).read_text(), "endless")
    out["fallback"] = engine.fallback_reason
    out["standing_by"] = engine.standby is not None  # the next save's grade, started
    engine.close()
    from judge.isolation import children_of
    out["left_after_close"] = children_of(os.getpid())
    print(json.dumps(out))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork engine is used on Linux only")
@pytest.mark.timeout(120)
def test_watch_regrades_a_file_changed_on_disk_in_a_forked_child(tmp_path):
    """The real engine, run as `make watch` runs it: one process imports torch once, then
    each save is graded in forked children (two shards), started before the save where they
    can be; a kata past the wall-clock limit is killed."""
    folder = tmp_path / "katas"
    folder.mkdir()
    (folder / "causal_mask.py").write_text(STUB)
    (tmp_path / "wrong.py").write_text(WRONG)
    (tmp_path / "endless.py").write_text(SLEEPS)  # past the wall-clock limit on no CPU: the pool's core
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            WATCH_DRIVER,
            str(ROOT),
            str(folder),
            str(ROOT / "solutions" / "causal_mask.py"),
            str(tmp_path / "wrong.py"),
            str(tmp_path / "endless.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["kind"] == "fork" and out["fallback"] == ""
    assert out["standing_by"] and out["left_after_close"] == []  # let go, nothing left running
    assert out["unchanged"] == [] and out["touched"] == []
    assert out["solution"] == [["pass", "all 2 tests passed"]]
    [(status, message)] = out["wrong"]
    assert status == "fail" and "causal_mask(" in message
    [(status, message)] = out["endless"]
    assert status == "timeout" and "stopped after 1 s" in message
    assert out["timing"].get("cpu", {}).get("ratio", 0) > 0, out["timing"]
    print(f"forked grade of causal_mask: {out['solution_s']:.2f} s (prepare once: {out['prepare_s']:.1f} s)")
    assert out["solution_s"] < 10  # about half a second on an idle machine


def test_watch_poll_grades_each_real_change_once_and_records_it(places):
    engine, out = FakeEngine(), io.StringIO()
    watcher = watch.Watcher(engine, places.katas, NAMES, seed=3, history=history_of(places), out=out)
    target = places.kata_file("causal_mask")
    assert watcher.poll() == [] and engine.graded == []  # nothing saved yet
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))  # saved unchanged
    assert watcher.poll() == []
    target.write_text(WRONG)
    [result] = watcher.poll()
    assert (result.name, result.status) == ("causal_mask", "fail")
    assert watcher.poll() == []  # graded once
    target.write_text(SOLUTION)
    [result] = watcher.poll()
    assert result.status == "pass"
    shown = out.getvalue()
    assert "causal_mask: fail  2/4 tests" in shown and "first failing check: matches the reference" in shown
    assert "causal_mask: pass  4/4 tests" in shown and "time vs PyTorch: cpu 0.50x" in shown
    assert "verdict" in shown and "after the save" in shown
    records = [r for r in history_of(places).read() if r["event"] == "grade"]
    assert [(r["kata"], r["status"], r["source"]) for r in records] == [
        ("causal_mask", "fail", "watch"),
        ("causal_mask", "pass", "watch"),
    ]
    assert records[0]["sha"] != records[1]["sha"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["Ctrl-C", "kill", "hang-up"])
def test_ctrl_c_kill_or_hang_up_stops_watch_with_a_one_line_goodbye(tmp_path, stop):
    """Ctrl-C, and `kill` or a closed terminal as well: each is a stop that cleans up (the
    terminal test checks that a stopped watch leaves nothing in the temporary directory)."""
    (tmp_path / "katas").mkdir()
    env = dict(os.environ, KATAS_DIR=str(tmp_path / "katas"), KATAS_STATE=str(tmp_path / "state"))
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "practice.py"), "watch", "--engine", "process"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As at a terminal: a suite started in the background (`make test &`) ignores SIGINT, and a
        # child inherits that, so Ctrl-C would never reach the watcher.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert "Watching" in process.stdout.readline() + process.stdout.readline()
        process.send_signal(stop)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0
    assert stdout.strip().splitlines()[-1].startswith("Stopped watching") and "Traceback" not in stdout + stderr


# --------------------------------------------------------------------------- reset, diff, hint


def test_reset_keeps_the_attempt_then_restores_the_stub(places, capsys):
    target = places.kata_file("causal_mask")
    target.write_text(WRONG)
    args = cli.parse_args(["reset", "--kata", "causal_mask"])
    assert reset.reset_command(args, places, now=1_800_000_000) == 0
    assert reset.reset_command(args, places, now=1_800_000_000) == 0  # already the stub: nothing kept
    assert target.read_text() == STUB
    kept = list((places.attempts / "causal_mask").iterdir())
    assert len(kept) == 1 and kept[0].read_text() == WRONG
    printed = capsys.readouterr().out
    assert f"Kept your attempt: {kept[0]}" in printed and "already the stub" in printed
    target.write_text(SOLUTION)  # a second attempt in the same second gets a name of its own
    reset.reset_command(args, places, now=1_800_000_000)
    assert sorted(p.read_text() for p in (places.attempts / "causal_mask").iterdir()) == sorted([WRONG, SOLUTION])
    assert [r["event"] for r in history_of(places).read()] == ["reset", "reset"]


def test_diff_shows_the_difference_and_whether_it_passes(places):
    args = cli.parse_args(["diff", "--kata", "causal_mask", "--seed", "1"])
    out = io.StringIO()
    assert diff.diff_command(args, places, out=out, engine=FakeEngine()) == 1
    text = out.getvalue()
    assert "--- " in text and "(yours)" in text and "+++ solutions/causal_mask.py (reference)" in text
    assert "-    raise NotImplementedError" in text and "+    return torch.triu(ones, diagonal=1)" in text
    assert "### BEGIN SOLUTION" not in text and "does not pass yet" in text
    assert "+    # TODO" not in text  # the reference's own TODO lines (kept for the stub) are not shown
    places.kata_file("causal_mask").write_text(reference_text(SOLUTION))
    out = io.StringIO()
    assert diff.diff_command(args, places, out=out, engine=FakeEngine()) == 0
    assert "No difference" in out.getvalue() and "causal_mask passes." in out.getvalue()
    assert [r["source"] for r in history_of(places).read()] == ["diff", "diff"]


@pytest.mark.timeout(120)
def test_make_diff_grades_with_the_real_grader(tmp_path):
    (tmp_path / "katas").mkdir()
    (tmp_path / "katas" / "causal_mask.py").write_text(WRONG)
    run = run_practice("diff", "--kata", "causal_mask", tmp_path=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "-    return torch.triu(ones, diagonal=0)" in run.stdout
    assert "+    return torch.triu(ones, diagonal=1)" in run.stdout
    assert "causal_mask: fail" in run.stdout and "does not pass yet" in run.stdout


def test_hint_gives_one_more_each_time_then_says_none_are_left(places, capsys):
    kata = next(k for k in CATALOG if k.name == "causal_mask")
    args = cli.parse_args(["hint", "--kata", "causal_mask"])
    for number in range(1, len(kata.hints) + 1):
        assert hint.hint_command(args, places) == 0
        printed = capsys.readouterr().out
        assert f"Hint {number} of {len(kata.hints)}" in printed and kata.hints[number - 1] in printed
        assert json.loads(places.hints.read_text())["causal_mask"] == number
    assert hint.hint_command(args, places) == 0
    assert "No hints left for causal_mask" in capsys.readouterr().out
    assert json.loads(places.hints.read_text())["causal_mask"] == len(kata.hints)
    assert [r["number"] for r in history_of(places).read() if r["event"] == "hint"] == list(
        range(1, len(kata.hints) + 1)
    )


def test_hints_during_a_mock_interview_count_for_the_mock(places, capsys):
    clock = FakeClock()
    plan = mock.start_mock(places, CATALOG, n=2, minutes=30, seed=4, now=clock.now())
    name = plan.katas[0]
    hint.hint_command(cli.parse_args(["hint", "--kata", name]), places, now=clock.now())
    assert "counted for the mock interview" in capsys.readouterr().out
    assert json.loads(plan.hints_file.read_text()) == {name: 1} and not places.hints.exists()
    hint.hint_command(cli.parse_args(["hint", "--kata", name]), places, now=clock.now() + 31 * 60)
    assert json.loads(places.hints.read_text()) == {name: 1}  # after the mock: the learner's own counter


def test_every_kata_has_three_progressive_hints():
    missing = [k.name for k in CATALOG if len(k.hints) != 3 or not all(h.strip() for h in k.hints)]
    assert not missing, f"give these katas hints = [nudge, approach, near-answer] in info.toml: {missing}"


# --------------------------------------------------------------------------- mock


def test_mock_picks_mixed_difficulties_repeatably():
    tiers = len({k.difficulty for k in CATALOG})
    for seed in range(20):
        picked = mock.pick_katas(CATALOG, 3, seed)
        assert picked == mock.pick_katas(CATALOG, 3, seed)
        assert len({k.name for k in picked}) == 3 and len({k.difficulty for k in picked}) == min(3, tiers)
        assert [k.difficulty for k in picked] == sorted(k.difficulty for k in picked)
    assert {k.name for k in mock.pick_katas(CATALOG, len(CATALOG), 0)} == set(NAMES)


def test_mock_creates_its_workspace_and_writes_its_report_with_an_injected_clock(places):
    before = {p.name: p.read_text() for p in places.katas.iterdir()}
    clock, out = FakeClock(), io.StringIO()
    plan = mock.start_mock(places, CATALOG, n=3, minutes=None, seed=11, now=clock.now())
    assert plan.folder.parent == places.mocks and sorted(p.name for p in plan.folder.glob("*.py")) == sorted(
        f"{n}.py" for n in plan.katas
    )
    for name in plan.katas:  # bare stubs, as an interview gives them
        kata = next(k for k in CATALOG if k.name == name)
        assert (plan.folder / f"{name}.py").read_text() == mock.interview_stub(kata)
        assert "raise NotImplementedError" in mock.interview_stub(kata) and "TODO" not in mock.interview_stub(kata)
    assert plan.minutes == sum(k.minutes for k in CATALOG if k.name in plan.katas)
    listing = mock.task_list(plan, CATALOG)
    assert all(name in listing for name in plan.katas) and "min" in listing

    first, second, third = plan.katas
    solution = {n: (ROOT / "solutions" / f"{n}.py").read_text() for n in plan.katas}
    clock.at = {
        60: lambda: (plan.folder / f"{first}.py").write_text("def half_done(): pass\n"),
        180: lambda: (plan.folder / f"{first}.py").write_text(solution[first]),
        600: lambda: (plan.folder / f"{second}.py").write_text(solution[second]),
    }
    hint.hint_command(cli.parse_args(["hint", "--kata", second]), places, out=io.StringIO(), now=clock.now())
    session = mock.MockSession(
        plan, CATALOG, FakeEngine(), places, out=out, now=clock.now, sleep=clock.sleep, interval=5
    )
    report = session.run()

    assert report["reason"] == "time is up" and report["elapsed_s"] == plan.minutes * 60
    rows = {k["kata"]: k for k in report["katas"]}
    assert rows[first]["status"] == "pass" and 180 <= rows[first]["first_pass_s"] < 190
    assert rows[second]["status"] == "pass" and 600 <= rows[second]["first_pass_s"] < 610
    assert 410 <= rows[second]["solve_s"] <= 430 and rows[second]["hints"] == 1 and rows[first]["hints"] == 0
    assert rows[second]["vs_suggested"] == pytest.approx(
        rows[second]["solve_s"] / (rows[second]["suggested_minutes"] * 60), abs=0.01
    )
    assert rows[third]["status"] == "todo" and rows[third]["first_pass_s"] is None
    assert report["passed"] == 2 and report["score"] == pytest.approx(200 / 3, abs=0.1)
    assert json.loads((plan.folder / "report.json").read_text()) == report
    text = (plan.folder / "report.txt").read_text()
    assert "time is up" in text and "2 of 3 pass" in text and first in text
    assert mock.MockPlan.load(plan.folder).state == "ended"
    assert [r for r in history_of(places).read() if r["event"] == "mock"] == [report]
    assert {r["kata"] for r in history_of(places).read() if r["event"] == "grade"} == {first, second}
    assert {p.name: p.read_text() for p in places.katas.iterdir()} == before  # katas/ untouched
    assert "report" in out.getvalue()


@pytest.mark.parametrize("how", ["all pass", "stopped"])
def test_mock_ends_when_everything_passes_or_the_learner_stops(places, how):
    clock = FakeClock()
    plan = mock.start_mock(places, CATALOG, n=2, minutes=60, seed=2, now=clock.now())

    def solve_all():
        for name in plan.katas:
            (plan.folder / f"{name}.py").write_text((ROOT / "solutions" / f"{name}.py").read_text())

    def interrupt():
        raise KeyboardInterrupt

    clock.at = {120: solve_all if how == "all pass" else interrupt}
    session = mock.MockSession(
        plan, CATALOG, FakeEngine(), places, out=io.StringIO(), now=clock.now, sleep=clock.sleep, interval=1
    )
    report = session.run()
    assert report["reason"] == how and 120 <= report["elapsed_s"] <= 122
    assert report["passed"] == (2 if how == "all pass" else 0)
    assert (plan.folder / "report.txt").exists()


def test_an_interview_is_one_kata_from_a_bare_stub_graded_on_its_math(places):
    """make interview KATA=name: the bare stub in .katas/interview/<stamp>/, the kata's minutes,
    a verdict on the core tests only with the conventions listed after it, the report and history."""
    clock, out = FakeClock(), io.StringIO()
    kata = next(k for k in CATALOG if k.name == "multi_head_attention")
    plan = mock.start_interview(places, kata, minutes=None, seed=3, now=clock.now())
    assert plan.folder.parent == places.interviews and plan.katas == [kata.name] and plan.mode == "interview"
    assert plan.minutes == kata.minutes
    stub = (plan.folder / f"{kata.name}.py").read_text()
    assert stub == mock.interview_stub(kata) and kata.interview.strip() in stub and "TODO" not in stub
    assert "Interview " in mock.task_list(plan, CATALOG) and "bare stub" in mock.task_list(plan, CATALOG)

    class MathOnly(FakeEngine):
        """The math right, one convention missed."""

        def grade(self, name, path, seed):
            titles = {"works in half precision": False, "leaves its inputs alone": True}
            tiers = {"core": {"passed": 16, "total": 16}, "conventions": {"passed": 10, "total": 11, "titles": titles}}
            missed = {"name": "works in half precision [float16]", "tier": "conventions", "message": "..."}
            return KataResult(name, "fail", 26 / 27, 26, 27, "1 convention missed", [missed], tiers=tiers)

    clock.at = {60: lambda: (plan.folder / f"{kata.name}.py").write_text("class MultiHeadAttention: ...\n")}
    session = mock.MockSession(plan, CATALOG, MathOnly(), places, out=out, now=clock.now, sleep=clock.sleep, interval=5)
    report = session.run()
    shown = out.getvalue()
    assert report["reason"] == "all pass" and report["mode"] == "interview" and report["passed"] == 1
    assert "multi_head_attention: pass  16/16 tests" in shown
    assert "a production version would add (not counted in an interview; 10 of 11 convention tests pass):" in shown
    assert "  ✗ works in half precision" in shown and "  ✓ leaves its inputs alone" in shown
    assert report_text_title(plan) in (plan.folder / "report.txt").read_text()
    assert [r["status"] for r in history_of(places).read() if r.get("event") == "grade"] == ["pass"]


def report_text_title(plan) -> str:
    return f"Interview {plan.id} report: every kata passes"


# --------------------------------------------------------------------------- history and progress


def test_history_survives_an_interrupted_write(tmp_path):
    history = History(tmp_path / "history.jsonl")
    history.append({"event": "grade", "kata": "causal_mask", "status": "fail", "score": 0.5})
    history.append({"event": "grade", "kata": "causal_mask", "status": "pass", "score": 1.0})
    with open(history.path, "ab") as file:  # a run killed in the middle of a write
        file.write(b'{"ts": 1, "event": "grade", "kata": "causal_m')
    assert [r["status"] for r in history.read()] == ["fail", "pass"]
    history.append({"event": "hint", "kata": "causal_mask", "number": 1})
    assert [r["event"] for r in history.read()] == ["grade", "grade", "hint"]
    assert history.path.read_bytes().count(b"\n") == 4  # the torn line stays on a line of its own
    assert "causal_mask" in progress.progress_text(history.read(), CATALOG, {}, history.path)


def test_progress_shows_best_attempts_fastest_mock_and_trend(places, capsys):
    history = history_of(places)
    for sha, status, score in [("a", "todo", 0), ("b", "fail", 0.5), ("b", "fail", 0.5), ("c", "pass", 1.0)]:
        history.append(
            {"event": "grade", "kata": "causal_mask", "source": "watch", "sha": sha, "status": status, "score": score}
        )
    for solve in (400.0, 250.0):
        history.append(
            {
                "event": "mock",
                "mock": "m",
                "passed": 1,
                "score": 100.0,
                "katas": [{"kata": "causal_mask", "status": "pass", "solve_s": solve}],
            }
        )
    places.hints.parent.mkdir(parents=True, exist_ok=True)
    places.hints.write_text(json.dumps({"causal_mask": 2}))
    assert progress.progress_command(cli.parse_args(["progress"]), places) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("causal_mask "))
    assert row.split()[:4] == ["causal_mask", "100%", "2", "pass"]  # best, distinct versions graded (the stub none), last
    assert "2/3" in row and "4:10" in row and " ▅▅█" in row and "↑" in row
    assert "Mock interviews: 2" in printed
    other = next(line for line in printed.splitlines() if line.startswith("padding_mask "))
    assert other.split()[1:3] == ["-", "0"]


def test_check_results_of_the_learners_katas_are_recorded(places, monkeypatch):
    monkeypatch.setenv("KATAS_DIR", str(places.katas))
    monkeypatch.setenv("KATAS_STATE", str(places.state))
    result = KataResult("causal_mask", "todo", 0.0, 0, 4, "not started")
    record_check([result], ROOT / "solutions", seed=1)  # not the learner's files
    assert history_of(places).read() == []
    record_check([result], places.katas, seed=1)
    [record] = history_of(places).read()
    assert (record["source"], record["kata"], record["status"]) == ("check", "causal_mask", "todo")


def test_a_pass_inside_a_mock_is_not_credited_to_the_learners_katas(places, capsys):
    """Issue 15, friction 5: a mock's files are fresh stubs elsewhere; katas/ may still be the stub."""
    history = history_of(places)
    history.append({"event": "grade", "kata": "causal_mask", "source": "check", "status": "todo", "score": 0.0})
    history.append({"event": "grade", "kata": "causal_mask", "source": "mock", "status": "pass", "score": 1.0})
    history.append({"event": "grade", "kata": "padding_mask", "source": "mock", "status": "pass", "score": 1.0})
    progress.progress_command(cli.parse_args(["progress"]), places)
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("causal_mask "))
    assert row.split()[1:4] == ["-", "0", "-"]  # the untouched stub is no attempt (issue 22)
    other = next(line for line in printed.splitlines() if line.startswith("padding_mask "))
    assert other.split()[1:3] == ["-", "0"]


def test_a_failure_of_the_environment_is_never_an_attempt(places, monkeypatch):
    monkeypatch.setenv("KATAS_DIR", str(places.katas))
    monkeypatch.setenv("KATAS_STATE", str(places.state))
    broken = KataResult("causal_mask", "error", 0.0, 0, 0, "could not collect", internal_error=True)
    record_check([broken], places.katas, seed=1)
    history_of(places).append_grade(broken, source="watch", seed=1, sha=None, now=1.0)
    assert history_of(places).read() == []


@pytest.mark.parametrize("command", ["watch", "diff --kata causal_mask", "mock"])
def test_practice_with_a_python_that_lacks_torch_says_so_in_one_line(command, tmp_path):
    run = subprocess.run(
        [sys.executable, "-S", str(ROOT / "practice.py"), *command.split()],  # -S: no site-packages
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    [line] = run.stderr.strip().splitlines()
    assert "lacks torch" in line and "make setup" in line
    assert not (tmp_path / ".katas").exists()


# --------------------------------------------------------------------------- command line


@pytest.mark.parametrize(
    "argv, words",
    [
        (["hint"], "name the kata"),
        (["reset", "--kata", ""], "name the kata"),
        (["diff", "--kata", "no_such_kata"], "unknown kata 'no_such_kata'"),
        (["watch", "--kata", "no_such_kata"], "unknown kata"),
        (["mock", "--n", "0"], "N must be at least 1"),
        (["mock", "--n", "three"], "N must be a whole number"),
        (["mock", "--n", "99"], "there are only"),
        (["mock", "--minutes", "abc"], "MINUTES must be a number"),
        (["mock", "--minutes", "-5"], "MINUTES must be more than 0"),
        (["mock", "--seed", "x"], "SEED must be a whole number"),
        (["progress", "--verbose"], "unrecognized arguments"),
        (["juggle"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, tmp_path):
    run = run_practice(*argv, tmp_path=tmp_path)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and words in lines[0], run.stderr
    assert not (tmp_path / "state").exists()  # bad input changes nothing


def test_make_lists_the_practice_targets_and_passes_bad_input_through(tmp_path):
    inherited = {
        key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")
    }
    env = dict(inherited, KATAS_DIR=str(tmp_path / "katas"), KATAS_STATE=str(tmp_path / "state"))
    make = ["make", "-s", f"PYTHON={sys.executable}"]  # this Python: make never sets up a .venv here
    listed = subprocess.run([*make, "help"], cwd=ROOT, capture_output=True, text=True, env=env, check=False).stdout
    for target in ("watch", "hint", "reset", "diff", "mock", "progress"):
        assert f"make {target} " in listed, listed
    run = subprocess.run([*make, "mock", "N=0"], cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 2 and run.stderr.splitlines()[0].startswith("practice.py: error: argument --n: N must")

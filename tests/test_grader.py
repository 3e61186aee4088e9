"""The grader's command line: JSON, exit codes, usage errors, one kata's fault never stopping
the others, and the README's kata table."""

import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from scripts import run_script
from sleeper import sleeper

from judge.catalog import kata_names, kata_table, load_catalog
from judge.engines import ProcessEngine
from judge.learning import load_paths
from judge.limits import Limits
from judge.paths import ROOT, spec_module
from judge.protocol import KataResult, Status
from judge.scheduling import Job, Server, grade_all, time_all
from judge.stubs import make_stub
from judge.testing.spec import tolerance_table

BROKEN = ROOT / "tests" / "broken"


def run_grader(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "grader.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.mark.timeout(120)
@pytest.mark.waits
def test_a_kata_past_its_wall_clock_limit_is_killed_and_reported_and_leaves_no_temp_dir(tmp_path, tmp_path_factory):
    """Killed, its judging process cleans up nothing: the kata process's private dir must be in
    the grade's own folder, which the grader removes, not in the temp dir (TMPDIR here). 6 s:
    at 4 s, with a second make test beside it, the fresh process's start alone reached the limit."""
    kata = sleeper(tmp_path_factory.mktemp("sleeper"))
    engine = ProcessEngine(device="cpu", limits=Limits(time_limit=6, test_timeout=60), env={"TMPDIR": str(tmp_path)})
    verdict = engine.grade("causal_mask", kata, 1)
    assert verdict.status == "timeout" and "stopped after 6 s" in verdict.message, verdict
    assert not list(tmp_path.iterdir()), f"left behind: {sorted(p.name for p in tmp_path.iterdir())}"


def test_a_limit_counts_cpu_time_or_wall_clock_time_less_the_waits_for_a_cpu():
    from judge import isolation

    readings = iter([(0.0, 0.0), (1.0, 4.0), (1.0, 4.0), (1.2, 9.0), (3.5, 4.0)])  # (CPU used, waited) from /proc
    clock = isolation.Clock(100.0, [1], read=lambda pids: next(readings))  # reads (0, 0)
    assert not clock.over(102.0, 3.0)  # within the limit: /proc is not read
    assert not clock.over(106.0, 3.0)  # 6 s of wall-clock time, 4 of them waiting: 2 count
    assert clock.over(107.5, 3.0)  # 7.5 s, 4 waiting: 3.5 count
    assert not clock.over(110.0, 3.0)  # 10 s, 9 waiting: 1 counts, and 1.2 s of CPU
    assert clock.over(104.0, 3.0)  # 3.5 s of CPU in 4 s (threads in parallel): over, whatever the waits
    assert clock.over(100.0 + 3.0 * isolation.HARD_FACTOR + 1, 3.0)  # past the last resort


def test_a_job_asks_the_fork_server_for_its_own_seed_limits_and_variables():
    """The test suite's batches share fork servers (tests/pool.py): each request carries its
    job's settings, and a job without them gets the call's seed and the server's limits."""
    server = Server.__new__(Server)  # no process: only the requests it would write
    server.limits = Limits(time_limit=60, test_timeout=20)
    asked = []

    def ask(request: dict, timeout: float) -> dict:
        asked.append((request, timeout))
        return KataResult(request["name"], Status.PASS, 1.0, 1, 1, "").to_json(internal=True)

    server.ask = ask
    own = Limits(time_limit=120, test_timeout=3)
    server.grade(Job("causal_mask", ROOT / "x.py", seed=7, limits=own, env={"KATAS_SANDBOX": "off"}), 1)
    server.grade(Job("causal_mask", ROOT / "x.py"), 1)
    (mine, my_wait), (plain, plain_wait) = asked
    assert (mine["seed"], mine["limits"]["test_timeout"], mine["env"]) == (7, 3, {"KATAS_SANDBOX": "off"})
    assert (plain["seed"], plain["limits"]["test_timeout"], plain["env"]) == (1, 20, {})
    assert my_wait > plain_wait  # it waits for the job's own time limit
    with pytest.raises(ValueError, match="KATAS_LANG"):  # the server's modules keep its language
        zh = Job("causal_mask", ROOT / "x.py", env={"KATAS_LANG": "zh"})
        grade_all([zh], seed=1, device="cpu", limits=Limits(), workers=1, fork=True, env={"KATAS_LANG": "en"})


SHARED_SLOTS = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from judge import scheduling
    from judge.limits import Limits
    from judge.protocol import KataResult, Status
    running, most, lock = [0], [0], threading.Lock()

    class Recording:
        def __init__(self, **_):
            pass

        def grade(self, name, path, seed, *, first_failure=False):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1
            return KataResult(name, Status.PASS, 1.0, 1, 1, "")

    scheduling.ProcessEngine = Recording
    kata = Path(sys.argv[2]) / "causal_mask.py"
    kata.write_text("")
    jobs = [scheduling.Job("causal_mask", kata)] * 4

    def both(slots):
        most[0] = 0
        options = {"seed": 1, "device": "cpu", "limits": Limits(), "workers": 2, "fork": False, "slots": slots}
        lanes = [threading.Thread(target=scheduling.grade_all, args=(jobs,), kwargs=options) for _ in range(2)]
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
        return most[0]

    print(json.dumps({"one slot": both(threading.Semaphore(1)), "no slots": both(None)}))
""")


def test_grade_alls_that_share_slots_never_grade_more_at_once_than_the_slots(tmp_path):
    """The suite's pool runs a grade_all a lane, all of them in one set of slots: a grade, with
    the start of its fork server, holds a slot while it runs. Here two grade_alls of two workers
    each, with a stand-in engine that records how many grade at once: in a fresh Python, since
    it replaces scheduling.ProcessEngine, which the pool's threads in this process use meanwhile
    (their fresh-process grades got the stand-in's verdicts)."""
    most = run_script(SHARED_SLOTS, str(tmp_path))
    assert most["one slot"] == 1
    assert most["no slots"] > 1  # without slots, the four workers overlap


@pytest.mark.timeout(300)
def test_a_busy_machine_never_times_out_a_correct_kata():
    """causal_mask/slow_but_correct burns 0.6 s of CPU in its first test: within a 1.2 s limit on an
    idle machine, past it in wall-clock time with two CPU hogs on its core. The time its
    processes waited for a CPU does not count, so it passes. The grading processes and the hogs
    share one core (the other stays free for the rest of the suite), and the hogs start once
    the fork server is warm, so they run for one grade only."""
    core, everywhere = min(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})  # this thread only: the server started here inherits it
    try:
        server = Server(device="cpu", limits=Limits(time_limit=60, test_timeout=1.2), threads=1)
    finally:
        os.sched_setaffinity(0, everywhere)
    hogs = []
    try:
        assert server.grade(Job("causal_mask", ROOT / "solutions" / "causal_mask.py"), 1).status == "pass"
        hog = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
        hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
        verdict = server.grade(Job("causal_mask", BROKEN / "causal_mask" / "slow_but_correct.py"), 1)
    finally:
        for process in hogs:
            process.kill()
            process.wait()
        server.close()
    assert verdict.status == "pass", verdict.message


@pytest.mark.timeout(300)
def test_json_report_and_exit_status_for_solutions(tmp_path):
    out = tmp_path / "result.json"
    run = run_grader(  # one worker: its fork server grades both, then times them
        "--impl", "solutions", "--kata", "causal_mask", "--kata", "padding_mask", "--jobs", "1", "--json", str(out),
        "--device", "cpu",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["score"] == 100
    assert [k["name"] for k in data["katas"]] == ["causal_mask", "padding_mask"]
    for kata in data["katas"]:
        assert {"name", "status", "score", "passed", "total", "message", "timing"} <= set(kata)
        assert kata["status"] == "pass" and kata["score"] == 1.0 and kata["passed"] == kata["total"] > 0
        cpu = kata["timing"]["cpu"]
        assert cpu["median_s"] > 0 and cpu["reference_median_s"] > 0
        assert cpu["ratio"] > 0  # the median of per-round ratios, near median_s / reference_median_s
        assert cpu["threads"] == 1 and cpu["ratio_low"] <= cpu["ratio"] <= cpu["ratio_high"] and "reliable" in cpu
    assert "causal_mask" in run.stdout and "pass" in run.stdout
    assert "x (" in run.stdout or "timing unreliable" in run.stdout  # a busy machine is said to be busy


# One grader run, one worker, the katas in this order: each broken file (given to a kata of one
# function, under that function's name) between two correct katas, so the kata after it is
# graded by what survived, or by a new fork server. One run for the three: each run starts a
# grader and a fork server (about 3 CPU-s), and kills_the_fork_server a second server.
IN_ONE_RUN = [
    ("softmax", None),
    ("causal_mask", "segfault"),
    ("positional_encoding", None),
    ("padding_mask", "kills_its_parent"),
    ("rms_norm", None),
    ("cross_entropy", "kills_the_fork_server"),
    ("swiglu", None),
]


def broken_as(kata: str, broken: str) -> str:
    """tests/broken/causal_mask/<broken>.py, its one function renamed to `kata`'s (what it does
    to its processes never reads its arguments)."""
    text = (BROKEN / "causal_mask" / f"{broken}.py").read_text()
    stub = (ROOT / "katas" / f"{kata}.py").read_text().splitlines()
    function = next(line for line in stub if line.startswith("def "))
    name = function[4 : function.index("(")]
    renamed = text.replace("def causal_mask(seq_len, *, device=None):", f"def {name}(*args, **kwargs):")
    assert renamed != text or kata == "causal_mask", broken
    return renamed


@pytest.fixture(scope="module")
def graded_in_one_run(tmp_path_factory):
    """(the run, its JSON report, the temporary files' folder it was given): IN_ONE_RUN graded
    with the sandbox off, to prove the walls behind it (the sandbox refuses a kata's signals to
    other processes)."""
    impl, out = tmp_path_factory.mktemp("attempt"), tmp_path_factory.mktemp("report") / "result.json"
    scratch = tmp_path_factory.mktemp("tmp")
    for kata, broken in IN_ONE_RUN:
        text = broken_as(kata, broken) if broken else (ROOT / "solutions" / f"{kata}.py").read_text()
        (impl / f"{kata}.py").write_text(text)
    katas = [arg for kata, _ in IN_ONE_RUN for arg in ("--kata", kata)]
    run = run_grader(
        "--impl", str(impl), *katas, "--jobs", "1", "--no-timing", "--json", str(out), "--device", "cpu",
        env={"KATAS_SANDBOX": "off", "TMPDIR": str(scratch)},
    )  # fmt: skip
    return run, json.loads(out.read_text()) if out.exists() else None, scratch


@pytest.mark.timeout(300)
@pytest.mark.parametrize("broken", ["segfault", "kills_its_parent", "kills_the_fork_server"])
def test_one_broken_kata_does_not_stop_the_others(graded_in_one_run, broken):
    """Whatever the kata does to its own process or to the processes above it, the grade goes
    on and the JSON report is written: the kata before it and the kata after it pass."""
    run, report, _ = graded_in_one_run
    assert run.returncode == 1 and report is not None, run.stdout + run.stderr
    assert [k["name"] for k in report["katas"]] == [kata for kata, _ in IN_ONE_RUN]
    statuses = [k["status"] for k in report["katas"]]
    place = next(n for n, (_, given) in enumerate(IN_ONE_RUN) if given == broken)
    assert statuses[place - 1 : place + 2] == ["pass", "crash", "pass"], list(zip(IN_ONE_RUN, statuses))


@pytest.mark.timeout(300)  # as its neighbour's: whichever test runs first builds the one-run fixture
def test_a_killed_fork_server_leaves_no_temporary_folder(graded_in_one_run):
    """The grades of a fork server that a kata killed (kills_the_fork_server) leave nothing in
    the temporary files' folder: their folders are under one of the grader's, which it removes."""
    *_, scratch = graded_in_one_run
    left = sorted(path.name for path in scratch.iterdir())
    assert not left, f"the grader left these in its temporary files' folder: {left}"


@pytest.mark.timeout(300)
def test_untouched_stub_is_todo_and_exits_1(tmp_path):
    (tmp_path / "causal_mask.py").write_text(make_stub((ROOT / "solutions" / "causal_mask.py").read_text()))
    run = run_grader("--impl", str(tmp_path), "--kata", "causal_mask", "--no-timing", "--device", "cpu")
    assert run.returncode == 1
    assert "todo" in run.stdout and "Score: 0.0 / 100" in run.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--kata", "no_such_kata"], "unknown kata 'no_such_kata'"),
        (["--impl", "no/such/folder"], "no such folder"),
        (["--device", "tpu"], "invalid choice"),
        (["--seed", "abc"], "invalid int value"),
        (["--jobs", "0"], "must be positive"),
        (["--json", "no/such/folder/out.json"], "no such folder for the report"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    run = run_grader(*args)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], run.stderr


@pytest.mark.parametrize("command", ["stubs", "table", "costs"])
def test_a_bad_option_of_a_maintainers_command_points_to_its_own_help(command):
    run = run_grader(command, "--bogus")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"grader.py: error: unrecognized arguments: --bogus (see: python grader.py {command} --help)"
    ], run.stderr


@pytest.mark.parametrize("readme, lang", [("README.md", "en"), ("README.zh-CN.md", "zh")])
def test_readme_kata_table_matches_info_toml(readme, lang):
    text = (ROOT / readme).read_text(encoding="utf-8")
    start, end = text.index("<!-- kata-table"), text.index("<!-- /kata-table -->")
    shown = text[start:end].split("\n", 1)[1].strip()
    assert shown == kata_table(load_catalog(), lang, load_paths(load_catalog())), (
        f"{readme}'s kata table is out of date: paste the output of `python grader.py table --lang {lang}`"
    )


@pytest.mark.timeout(300)
def test_each_kata_is_timed_in_a_process_of_its_own():
    """Hole 11: a kata that changes torch's global state when imported is caught by timing
    too, and the kata timed after it is not affected. That one is layer_norm, whose notes time
    autograd, which its kata process has removed: they are measured on the judge's side."""
    results = [KataResult(name, Status.PASS, 1.0, 4, 4, "") for name in ("causal_mask", "layer_norm")]
    paths = {
        "causal_mask": ROOT / "tests" / "broken" / "causal_mask" / "changes_default_dtype_at_import.py",
        "layer_norm": ROOT / "solutions" / "layer_norm.py",
    }
    time_all(results, paths, device="cpu", limits=Limits(), fork=True)
    assert "changed torch's default dtype" in results[0].timing.get("error", ""), results[0].timing
    assert results[1].timing["cpu"]["ratio"] > 0, results[1].timing
    assert "eager autograd" in results[1].timing["cpu"]["notes"], results[1].timing


def test_readme_tolerance_table_matches_the_specs():
    """Hole 7: the guide (docs/guide.md) states each kata's tolerances as its spec declares them."""
    readme = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    start, end = readme.index("<!-- tolerance-table"), readme.index("<!-- /tolerance-table -->")
    shown = readme[start:end].split("\n", 1)[1].strip()
    expected = tolerance_table([importlib.import_module(spec_module(name)).SPEC for name in kata_names(load_catalog())])
    assert shown == expected, f"docs/guide.md's tolerance table is out of date; it should read:\n{expected}"

"""The pytest plugin of the judging process (tests/conftest.py loads it).

Options: --impl (which kata files), --seed (replay the hidden shapes), --device, and for
the grader --results (the results file it owns; --results-private: its name deleted once
open), the memory and output limits, and --kata-timing (time the kata against its
reference instead of running the tests).

Before any test module is imported it forks the fork server of kata processes; it decides
before the kata loads which tests this machine cannot run (CUDA without CUDA) and leaves
them out; it has the kata named by the test module's SPEC loaded in a kata process of its
own, guarded by the spec's forbidden-call rules, and hands the tests proxies to it; after
each test it has the kata process report what the kata left behind (torch's state, a
refusal, a thread); and it writes one event per step to the results file, each failure
with its kind, decided from the exception itself (in the kata process for the kata's).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
import torch

from judge import costs, shards, templates
from judge.failures import error_kind, failure_text
from judge.isolation import keep_to_myself
from judge.language import pick, tr
from judge.limits import apply_limits
from judge.loading import load_kata, restore_torch_state, torch_state
from judge.paths import SOLUTIONS
from judge.protocol import (
    PRINTED_CUT,
    SEVERAL,
    Begin,
    Collected,
    ErrorKind,
    EventWriter,
    Finish,
    Outcome,
    Start,
    TestReport,
    Timing,
)
from judge.remote.client import KataProcess, RemoteKata
from judge.remote.zygote import Zygote
from judge.testing.checks import MESSAGE_LIMIT, Inconclusive
from judge.testing.tiers import CONVENTIONS, CORE, tier_of, title_zh
from judge.timing import TIMING_THREADS
from judge.warm import warm_up

OUTPUT_LIMIT = 300  # characters of a test's captured output kept in the report
NO_CUDA = "CUDA is not available"


def pytest_addoption(parser):
    group = parser.getgroup("katas", "Transformer Katas")
    group.addoption(
        "--impl",
        default="katas",
        help="folder of kata files to test (katas, solutions or any folder), or one kata file",
    )
    group.addoption("--seed", type=int, default=None, help="replay the hidden shapes of an earlier run")
    group.addoption(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: CPU, plus CUDA when available"
    )
    group.addoption("--results", default=None, help="(grader) append one JSON line per event to this file")
    group.addoption(
        "--results-private", action="store_true", help="(grader) delete the results file's name once it is open"
    )
    group.addoption("--memory-limit-mb", type=int, default=0, help="(grader) address-space limit on CPU-only runs")
    group.addoption("--output-limit-mb", type=int, default=0, help="(grader) limit on bytes written to files")
    group.addoption(
        "--kata-timing", action="store_true", help="(grader) time the kata against its reference; run no test"
    )
    group.addoption("--shard", default=None, help="(grader) run shard i of n: the tests i, i+n, ... (judge.shards)")
    group.addoption(
        "--gate", type=int, default=None, help="(grader) wait, tests collected, for a word on this descriptor"
    )
    group.addoption(
        "--template",
        type=int,
        default=None,
        help="(grader) wait, tests collected, for grades on this socket, each run in a copy (judge.templates)",
    )
    group.addoption("--timing-rounds", type=int, default=9, help="(grader) interleaved timing rounds")
    group.addoption(
        "--store-costs", default=None, help="(maintainers) write each kata test's call time to this file (judge.costs)"
    )
    group.addoption(
        "--timing-threads", type=int, default=TIMING_THREADS, help="(grader) CPU threads for both sides of a timing"
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "kata_cuda: a case that needs CUDA (left out where there is none)")
    config.addinivalue_line(
        "markers", "kata_tier(tier, stub_says=..., zh=...): core or conventions (judge.testing.tiers)"
    )
    # One thread: the references and comparisons are small, and on a busy machine every op of
    # a two-thread pool waits for its second thread (measured: 9 ms instead of 0.2 ms a linear).
    torch.set_num_threads(1)
    config.torch_baseline = torch_state()  # before any kata is imported
    # What a kata's first call imports (two seconds of sympy and dynamo), imported here once:
    # the kata processes are forked from here (begin_grade), warm.
    warm_up()
    config.kata_seed = None
    if config.getoption("template") is None:  # a template's grades begin in its copies
        begin_grade(config)


def begin_grade(config, zygote: Zygote | None = None) -> None:
    """What is a grade's own: its limits (judge.limits), the fork server of its kata processes
    (`zygote`: its template, else one forked here), its seed and its results file."""
    memory, output = config.getoption("memory_limit_mb"), config.getoption("output_limit_mb")
    apply_limits(memory, output, config.getoption("device"))
    # Kata processes are forked from here, before this process runs any tensor operation,
    # with the real stderr (the log; pytest captures this process's) for their crash reports.
    config.kata_zygote = zygote or Zygote(stderr=real_stderr(config))
    seed = config.getoption("seed")
    config.kata_seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
    results = config.getoption("results")
    if results:
        # The kata processes' private dirs (and any other temp dir of this grade) go in the
        # grade's own folder, which the grader removes however this process ends: killed at a
        # limit, it leaves no kata-tmp-* dir behind in /tmp.
        tempfile.tempdir = str(Path(results).parent)
        config.pluginmanager.register(ResultWriter(Path(results), config), "kata-results")
    else:  # the maintainers' test suite: its checks of texts read English whatever the locale
        os.environ.setdefault("KATAS_LANG", "en")
    if config.getoption("store_costs"):
        config.pluginmanager.register(costs.Recorder(Path(config.getoption("store_costs"))), "kata-costs")


def real_stderr(config) -> int | None:
    """This process's stderr before pytest captured it (a descriptor pytest keeps), if any."""
    capture = getattr(config.pluginmanager.get_plugin("capturemanager"), "_global_capturing", None)
    err = getattr(capture, "err", None)
    return getattr(err, "targetfd_save", None)


def pytest_sessionfinish(session, exitstatus):
    loaded = getattr(session.config, "kata_loaded", None)
    if loaded is not None:
        loaded[1]._process.close()


def pytest_report_header(config):
    cuda = "" if cuda_usable(config) or config.getoption("device") == "cpu" else f"; {NO_CUDA}: its cases are left out"
    return f"kata seed: {config.kata_seed} (replay with --seed {config.kata_seed}); implementation: {impl_root(config)}{cuda}"


def impl_root(config) -> Path:
    impl = Path(config.getoption("impl"))
    return impl if impl.is_absolute() else Path(config.invocation_params.dir) / impl


def impl_path(config, kata: str) -> Path:
    root = impl_root(config)
    return root if root.suffix == ".py" else root / f"{kata}.py"


def cuda_usable(config) -> bool:
    return config.getoption("device") != "cpu" and torch.cuda.is_available()


def pytest_generate_tests(metafunc):
    """A test taking `device` runs on the CPU and, where --device allows it, on CUDA; a core
    test on the CPU alone unless CUDA is asked for: the math is judged against the float64
    reference there, and where results are made is a convention, judged (values included, on
    a GPU) by its own tests."""
    if "device" in metafunc.fixturenames:
        choice = metafunc.config.getoption("device")
        devices = [choice] if choice != "auto" else ["cpu", "cuda"]
        if tier_of(metafunc.definition)[0] == CORE and choice == "auto":
            devices = ["cpu"]
        metafunc.parametrize(
            "device", [pytest.param(d, marks=pytest.mark.kata_cuda) if d == "cuda" else d for d in devices]
        )


def pytest_collection_modifyitems(session, config, items):
    """The tests in their run order (run_order). Cases this machine cannot run are left out
    here, before any kata code loads, and reported as unavailable: never as a skip a kata
    could raise itself."""
    undeclared = [item.nodeid for item in items if costs.is_kata_test(item) and tier_of(item)[0] is None]
    if undeclared:
        raise pytest.UsageError(f"{undeclared[0]}: a kata test declares its tier (@core or @convention(...))")
    items[:] = run_order(items)
    unavailable = [] if cuda_usable(config) else [item for item in items if item.get_closest_marker("kata_cuda")]
    if unavailable:
        config.kata_unavailable = {item.nodeid: [sentence(item), NO_CUDA] for item in unavailable}
        items[:] = [item for item in items if item.nodeid not in config.kata_unavailable]
        config.hook.pytest_deselected(items=unavailable)
    if config.getoption("shard"):
        try:
            kept = shards.select(items, *shards.parse(config.getoption("shard")))
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
        kept_ids = {id(item) for item in kept}
        left = [item for item in items if id(item) not in kept_ids]
        items[:] = kept
        config.hook.pytest_deselected(items=left)


def run_order(items: list) -> list:
    """Each kata's tests together (a kata process serves them all), core tests first (a run
    stopped at its first failure then says which tier failed), each tier cheapest first
    (judge.costs), in file order within a class of cost; other tests as they came."""
    table = costs.measured()
    groups: dict[str, int] = {}

    def key(item) -> tuple:
        kata = costs.is_kata_test(item)
        group = groups.setdefault(item.module.SPEC.kata if kata else item.nodeid.split("::")[0], len(groups))
        if not kata:
            return group, False, 0
        cost = costs.cost_class(costs.cost_of(costs.table_key(item.path, item.nodeid), table))
        return group, tier_of(item)[0] == CONVENTIONS, cost

    return sorted(items, key=key)


def pytest_collection_finish(session):
    """--template: a template (judge.templates) waits here for grades, and each grade's copy
    goes on from here with its own options and output. --gate: a grade started ahead of the
    save it judges (make watch) waits here, its tests collected, until the grader copies the
    kata file in and says go; if the grader lets it go (or is gone), it leaves without running
    a test."""
    config = session.config
    if config.getoption("template") is not None:
        device = config.getoption("device")
        begin_copy(session, templates.wait_for_grades(config.getoption("template"), device, take_options(config)))
        return
    gate = session.config.getoption("gate")
    if gate is None:
        return
    word = os.read(gate, 2)  # only the grader holds the other end (isolation.start_forked's `close`)
    os.close(gate)
    if not word:
        sys.stdout.flush()
        os._exit(0)


def take_options(config):
    """What a template does with each grade's option values (engines.grade_options) before it
    forks the grade and its kata processes: takes them as its own, as a grade started afresh
    has them from its flags."""

    def take(options: dict) -> None:
        for name, value in options.items():
            setattr(config.option, name, value)
        config.kata_seed = options["seed"]

    return take


def begin_copy(session, zygote: Zygote) -> None:
    """In a grade forked from a template (its options taken, take_options): pytest's capture
    afresh on this grade's output (the template's temporary files would carry one grade's
    prints into the next), then what begins a grade, with the template as the fork server of
    its kata processes, and its list of tests."""
    config = session.config
    capture = config.pluginmanager.get_plugin("capturemanager")
    if capture is not None and capture._global_capturing is not None:
        capture._global_capturing.stop_capturing()
        capture._global_capturing = None
        capture.start_global_capturing()
        capture.suspend_global_capture()
    begin_grade(config, zygote)
    writer = config.pluginmanager.get_plugin("kata-results")
    if writer is not None:
        writer.pytest_collection_finish(session)


@pytest.fixture(scope="module")
def kata(request):
    """The kata under test, from --impl, in a kata process of its own (this process never
    imports it): loaded there by the test module's SPEC, with what the kata forbids removed
    and inside the sandbox; here, a handle that runs scenarios there. The test modules of a
    kata split by concern share one kata process (core tests run first, so they interleave)."""
    spec = request.module.SPEC
    path = impl_path(request.config, spec.kata)
    key = (spec.kata, str(path))
    loaded = getattr(request.config, "kata_loaded", None)
    if loaded is not None and loaded[0] == key and not loaded[1]._process.closed:
        return loaded[1]
    if loaded is not None:
        loaded[1]._process.close()
    writer = request.config.pluginmanager.get_plugin("kata-results")
    process = KataProcess(request.config.kata_zygote, mirror_death=writer is not None)
    if writer is not None:  # the grader's clock: a hang here is the file's top-level code
        writer.working = [os.getpid(), request.config.kata_zygote.pid, process.pid]
        writer.events.write(Begin(nodeid=writer.running, importing=path.name, pids=writer.working))
    tests = (request.module.__name__, list(sys.path))
    kata = process.load(str(path), spec.kata, spec.guarded_symbols, tests, world=spec.world)
    if writer is not None:
        writer.events.write(Begin(nodeid=writer.running, pids=writer.working))
    request.config.kata_loaded = (key, kata)
    return kata


@pytest.fixture(autouse=True)
def kata_left_nothing_behind(request):
    """One kata must not poison the next: torch's global settings are as they were, no
    refusal went unreported (a swallowed one, one in a thread) and no thread it started
    is still running."""
    process = None
    if "kata" in request.fixturenames and hasattr(request.module, "SPEC"):
        kata = request.getfixturevalue("kata")
        process = kata._process if isinstance(kata, RemoteKata) else None
    if process is not None:
        process.begin_test()
    yield
    restore_torch_state(request.config.torch_baseline, when="the test")
    if process is not None:
        process.end_test()  # raises what the kata left behind


@pytest.fixture
def other_device(request) -> str:
    """A device besides the CPU, to prove results follow the requested device: CUDA when
    present (and --device allows it), else "meta", which has shapes and devices but no values."""
    return "cuda" if cuda_usable(request.config) else "meta"


@pytest.fixture
def seed(request) -> int:
    """Per-test seed, derived from the run's seed and the test's id so --seed replays it."""
    return zlib.crc32(f"{request.config.kata_seed}:{request.node.nodeid}".encode())


@pytest.fixture
def rng(seed) -> random.Random:
    return random.Random(seed)


@pytest.fixture
def gen(seed) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- failures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(Inconclusive):
        report.kata_inconclusive = str(call.excinfo.value.msg)
    elif report.failed:
        report.sections.append(("kata seed", f"replay with --seed {item.config.kata_seed}"))
        if call.excinfo is not None:
            report.kata_error = as_convention(item, describe_error(item, call.excinfo))
            report.kata_diagnosis = list(getattr(call.excinfo.value, "kata_diagnosis", []))
        refused = refusals(item) if call.when == "call" else []
        if refused:  # a refusal the kata swallowed (or met in a thread) decides what went wrong
            report.kata_error = (ErrorKind.FORBIDDEN, "ForbiddenCallError", refused[0][:MESSAGE_LIMIT])
            report.kata_diagnosis = []
        stop_early(item, report)
    return report


def stop_early(item, report) -> None:
    """A grade that stops early (--maxfail, a mutant's) stops at a failure that settles what a
    full grade would show (protocol.most_specific): one whose diagnosis names one slip, or
    none; past one that names several, it goes on (to --maxfail failures) for one that names
    one, as the learner's full grade would."""
    diagnosis = getattr(report, "kata_diagnosis", [])
    if item.config.getoption("maxfail") and not (diagnosis and diagnosis[0].startswith(SEVERAL)):
        item.session.shouldfail = "stopped at a failure that settles the diagnosis"


def as_convention(item, error: tuple[ErrorKind, str, str]) -> tuple[ErrorKind, str, str]:
    """A failed check of a convention says so, quoting the stub's line that states it."""
    kind, name, text = error
    tier, stub_says = tier_of(item)
    if tier != CONVENTIONS or kind not in (ErrorKind.MISMATCH, ErrorKind.RAISED, ErrorKind.SIGNATURE):
        return error
    return kind, name, tr('a convention (the stub: "{quote}"): {text}', quote=stub_says, text=text)


def refusals(item) -> list[str]:
    """The kata process's refusals during this test (a swallowed one is still one)."""
    kata = getattr(item, "funcargs", {}).get("kata")
    try:
        return kata._process.request("trips")["refused"] if isinstance(kata, RemoteKata) else []
    except Exception:  # noqa: BLE001 - a dead kata process has nothing more to say
        return []


def describe_error(item, excinfo) -> tuple[ErrorKind, str, str]:
    """(kind, exception type, one-paragraph message): as the kata process described it when
    the kata raised it there, else (a check of the judge's) from the exception here."""
    error = excinfo.value
    if hasattr(error, "kata_error"):
        kind, name, text = error.kata_error
    else:
        kind, name = error_kind(error, []), type(error).__name__
        text = failure_text(kind, name, str(error))
    return kind, name, text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ..."


def sentence(item) -> str:
    """test_output_matches_reference[float32-cpu] -> 'output matches reference [float32-cpu]',
    or the title its tier gives in Chinese for a learner who reads Chinese."""
    name = pick(item.originalname.removeprefix("test_").replace("_", " "), title_zh(item))
    params = item.name[len(item.originalname) :]
    return f"{name} {params}".strip()


class ResultWriter:
    """Writes the events of this run to the results file the grader owns, as they happen."""

    def __init__(self, path: Path, config):
        self.events = EventWriter(path)
        if config.getoption("results_private"):  # no kata process can open it by name
            os.unlink(path)
            keep_to_myself()
        self.config = config
        self.names: dict[str, str] = {}
        self.tiers: dict[str, str] = {}
        self.outcomes: dict[str, dict] = {}
        self.running = ""  # the nodeid of the test now running
        self.working = [os.getpid()]  # the processes at work on it: this one, its fork server, the kata's
        self.events.write(Start(seed=config.kata_seed, pid=os.getpid()))

    def pytest_collection_finish(self, session):
        self.names = {item.nodeid: sentence(item) for item in session.items}
        self.tiers = {item.nodeid: tier_of(item)[0] or CORE for item in session.items}
        unavailable = getattr(self.config, "kata_unavailable", {})
        self.events.write(Collected(tests=self.names, unavailable=unavailable, tiers=self.tiers))

    def pytest_runtest_logstart(self, nodeid, location):
        self.running = nodeid  # the test whose setup may import the kata (see the kata fixture)
        self.events.write(Begin(nodeid=nodeid, pids=self.working))

    def pytest_runtest_logreport(self, report):
        outcome = self.outcomes.setdefault(report.nodeid, {"outcome": Outcome.PASSED})
        printed = report.capstdout + report.capstderr
        if printed and "output" not in outcome:  # what the kata printed, truncated: enough to see, never a flood
            outcome["output"] = printed[:OUTPUT_LIMIT] + (PRINTED_CUT if len(printed) > OUTPUT_LIMIT else "")
        if outcome["outcome"] != Outcome.PASSED:
            return  # the first thing that went wrong is what the learner needs
        if hasattr(report, "kata_inconclusive"):
            outcome.update(outcome=Outcome.INCONCLUSIVE, message=report.kata_inconclusive)
        elif report.failed:
            kind, error, message = getattr(
                report, "kata_error", (ErrorKind.RAISED, "Error", report.longreprtext[-MESSAGE_LIMIT:])
            )
            outcome.update(outcome=Outcome.FAILED, kind=kind, error=error, message=message)
            outcome["diagnosis"] = getattr(report, "kata_diagnosis", [])
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcome.update(outcome=Outcome.SKIPPED, message=reason.removeprefix("Skipped: "))

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome = self.outcomes.get(nodeid, {"outcome": Outcome.FAILED, "message": "no report"})
        tier = self.tiers.get(nodeid, CORE)
        self.events.write(TestReport(nodeid=nodeid, name=self.names.get(nodeid, nodeid), tier=tier, **outcome))

    def pytest_sessionfinish(self, session, exitstatus):
        self.events.write(Finish(exitstatus=int(exitstatus), stopped=bool(session.shouldfail)))
        self.events.close()
        self.exitstatus = int(exitstatus)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config):
        """Leave now: a thread the kata left running would otherwise hold a fresh
        interpreter's exit (and not a forked one's), so both engines end the same way."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(getattr(self, "exitstatus", 1))


# --------------------------------------------------------------------------- timing mode


def pytest_runtestloop(session):
    """--kata-timing: time the kata of the collected test module against its reference
    (the spec's benchmark), in this process, and write a Timing event; run no test."""
    config = session.config
    if not config.getoption("kata_timing"):
        return None
    from judge.timing import measure

    spec = session.items[0].module.SPEC if session.items else None
    writer = config.pluginmanager.get_plugin("kata-results")
    if spec is None or spec.benchmark is None or writer is None:
        raise pytest.UsageError("--kata-timing needs --results and one kata's test module with a benchmark")
    process = KataProcess(config.kata_zygote, mirror_death=True)
    item = session.items[0]
    tests = (item.module.__name__, list(sys.path))
    kata = process.load(str(impl_path(config, spec.kata)), spec.kata, spec.guarded_symbols, tests, world=spec.world)
    reference = load_kata(SOLUTIONS / f"{spec.kata}.py", *spec.guarded_symbols)  # trusted: the reference's side
    restore_torch_state(config.torch_baseline, when=f"importing {spec.kata}")
    choice = config.getoption("device")
    devices = ["cuda"] if choice == "cuda" else ["cpu"] + (["cuda"] if choice == "auto" and cuda_usable(config) else [])
    timing = measure(
        spec.benchmark,
        kata,
        reference,
        devices,
        rounds=config.getoption("timing_rounds"),
        threads=config.getoption("timing_threads"),
    )
    process.close()
    writer.events.write(Timing(timing=timing))
    return True

"""Pytest wiring for the kata tests.

Options: --impl (which kata files to test), --seed (replay hidden shapes), --device,
and --results (used by grader.py: one JSON line per test outcome, in a file the grader
owns, so nothing the learner prints can forge a result).
"""

import json
import random
import resource
import zlib
from pathlib import Path

import pytest
import torch

from forbidden import NONE, ForbiddenCallError, GuardedKata, scan_escape_hatches
from kata_testing import MESSAGE_LIMIT, KataLoadError, load_kata

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_LIMIT = 300  # characters of a failed test's captured output kept in the report


def pytest_addoption(parser):
    group = parser.getgroup("katas", "Transformer Katas")
    group.addoption(
        "--impl",
        default="katas",
        help="folder of kata files to test (katas, solutions or any folder), or one kata file",
    )
    group.addoption("--seed", type=int, default=None, help="replay the hidden shapes of an earlier run")
    group.addoption(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: CPU, plus CUDA when available (skipped otherwise)",
    )
    group.addoption("--results", default=None, help="(grader) append one JSON line per test outcome to this file")
    group.addoption("--memory-limit-mb", type=int, default=0, help="(grader) address-space limit on CPU-only runs")
    group.addoption("--output-limit-mb", type=int, default=0, help="(grader) limit on bytes written to files")


def apply_limits(config) -> None:
    """Keep one kata from taking the machine down. The address-space limit applies only
    without CUDA, whose driver reserves far more virtual memory than it uses."""
    memory, output = config.getoption("memory_limit_mb"), config.getoption("output_limit_mb")
    if memory and (config.getoption("device") == "cpu" or not torch.cuda.is_available()):
        resource.setrlimit(resource.RLIMIT_AS, (memory << 20, memory << 20))
    if output:
        resource.setrlimit(resource.RLIMIT_FSIZE, (output << 20, output << 20))


def pytest_configure(config):
    apply_limits(config)
    seed = config.getoption("seed")
    config.kata_seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
    results = config.getoption("results")
    if results:
        config.pluginmanager.register(ResultWriter(Path(results), config), "kata-results")


def pytest_report_header(config):
    return f"kata seed: {config.kata_seed} (replay with --seed {config.kata_seed}); implementation: {impl_root(config)}"


def impl_root(config) -> Path:
    impl = Path(config.getoption("impl"))
    return impl if impl.is_absolute() else Path(config.invocation_params.dir) / impl


def impl_path(config, kata: str) -> Path:
    root = impl_root(config)
    return root if root.suffix == ".py" else root / f"{kata}.py"


def devices(config) -> list:
    choice = config.getoption("device")
    if choice != "auto":
        return [choice]
    no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
    return ["cpu", pytest.param("cuda", marks=no_cuda)]


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", devices(metafunc.config))


@pytest.fixture(scope="module")
def kata(request):
    """The module under test, imported from --impl; each test module names KATA and SYMBOL,
    and may name FORBIDDEN rules, enforced while the kata's own code runs."""
    module = request.module
    path = impl_path(request.config, module.KATA)
    hatches = scan_escape_hatches(path)
    if hatches:
        raise ForbiddenCallError(
            f"{path.name} uses {hatches[0].split(': ')[1]} ({hatches[0].split(':')[0]}), "
            "which reaches around the grader's checks; no kata needs it"
        )
    loaded = load_kata(path, module.SYMBOL)
    return GuardedKata(loaded, module.SYMBOL, getattr(module, "FORBIDDEN", NONE), module.KATA)


def torch_state() -> dict:
    return {
        "default dtype": torch.get_default_dtype(),
        "default device": torch.get_default_device(),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "number of threads": torch.get_num_threads(),
    }


@pytest.fixture(autouse=True)
def torch_state_is_unchanged():
    """One kata must not poison the next: torch's global settings are as they were."""
    before = torch_state()
    yield
    after = torch_state()
    changed = [name for name in before if after[name] != before[name]]
    if changed:
        torch.set_default_dtype(before["default dtype"])
        torch.set_default_device(before["default device"])
        torch.set_grad_enabled(before["grad mode"])
        torch.use_deterministic_algorithms(before["deterministic algorithms"])
        torch.set_num_threads(before["number of threads"])
        name = changed[0]
        raise AssertionError(
            f"the kata changed torch's {name} from {before[name]} to {after[name]} and left it so; "
            "restore global settings (e.g. with a context manager) or avoid them"
        )


@pytest.fixture
def other_device(request) -> str:
    """A device besides the CPU, to prove results follow the requested device: CUDA when
    present (and --device allows it), else "meta", which has shapes and devices but no values."""
    return "cuda" if torch.cuda.is_available() and request.config.getoption("device") != "cpu" else "meta"


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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        report.sections.append(("kata seed", f"replay with --seed {item.config.kata_seed}"))
        if call.excinfo is not None:
            report.kata_error = describe_error(item, call.excinfo)
    return report


def describe_error(item, excinfo) -> tuple[str, str]:
    """(exception type, one-paragraph message), pointing into the kata file when it raised there."""
    error = excinfo.value
    kind = type(error).__name__
    plain = isinstance(error, (AssertionError, KataLoadError, ForbiddenCallError))  # written to be read as is
    text = str(error) if plain else f"{kind}: {error}".rstrip(": ")
    kata_name = getattr(item.module, "KATA", None)
    if kata_name and not isinstance(error, AssertionError):
        kata_file = impl_path(item.config, kata_name).resolve()
        lines = [entry.lineno + 1 for entry in excinfo.traceback if Path(str(entry.path)).resolve() == kata_file]
        if lines:
            text += f" (raised at {kata_file.name}, line {lines[-1]})"
    return kind, text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ..."


def sentence(item) -> str:
    """test_output_matches_reference[float32-cpu] -> 'output matches reference [float32-cpu]'."""
    name = item.originalname.removeprefix("test_").replace("_", " ")
    params = item.name[len(item.originalname) :]
    return f"{name} {params}".strip()


class ResultWriter:
    """Appends JSON lines: collected tests, then each test's outcome, then the exit status.

    Written as the run goes, so a crash or a kill still leaves the outcomes so far.
    """

    def __init__(self, path: Path, config):
        self.file = path.open("a", encoding="utf-8")
        self.config = config
        self.outcomes: dict[str, dict] = {}
        self._write(event="start", seed=config.kata_seed)

    def _write(self, **record):
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def pytest_collection_finish(self, session):
        self.names = {item.nodeid: sentence(item) for item in session.items}
        self._write(event="collected", tests=list(self.names))

    def pytest_runtest_logreport(self, report):
        outcome = self.outcomes.setdefault(report.nodeid, {"outcome": "passed"})
        if report.failed and outcome["outcome"] != "failed":
            kind, text = getattr(report, "kata_error", ("Error", report.longreprtext[-MESSAGE_LIMIT:]))
            outcome.update(outcome="failed", error=kind, message=text)
            printed = report.capstdout + report.capstderr
            if printed:  # what the kata printed, truncated: enough to debug, never a flood
                outcome["output"] = printed[:OUTPUT_LIMIT] + (" ..." if len(printed) > OUTPUT_LIMIT else "")
        elif report.skipped and outcome["outcome"] == "passed":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcome.update(outcome="skipped", message=reason.removeprefix("Skipped: "))

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome = self.outcomes.get(nodeid, {"outcome": "failed", "message": "no report"})
        self._write(event="test", nodeid=nodeid, name=self.names.get(nodeid, nodeid), **outcome)

    def pytest_sessionfinish(self, session, exitstatus):
        self._write(event="finish", exitstatus=int(exitstatus))
        self.file.close()

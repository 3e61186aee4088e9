"""The grader itself: verdicts for broken kata files, JSON, exit codes and usage errors.

tests/broken/ holds causal_mask files that fail in every way a half-written kata can;
each must get the right status while the grader goes on to grade the rest.
"""

import json
import subprocess
import sys

import pytest

from judge.catalog import kata_table, load_catalog
from judge.engines import ProcessEngine
from judge.isolation import ProcessEnd
from judge.limits import Limits
from judge.paths import ROOT
from judge.protocol import Collected, ErrorKind, Finish, Outcome, TestReport
from judge.scheduling import Job, default_workers, grade_all
from judge.stubs import make_stub
from judge.verdicts import classify

BROKEN = ROOT / "tests" / "broken"
EXPECTED = {  # tests/broken/<kata>/<file> -> (status, words its message must contain)
    "causal_mask/syntax_error": ("error", "SyntaxError"),
    "causal_mask/raises_at_import": ("error", "IndexError"),
    "causal_mask/missing_symbol": ("error", "defines no `causal_mask`"),
    "causal_mask/endless_loop": ("timeout", "per-test limit of 3 s"),
    "causal_mask/exits_interpreter": ("crash", "exit code 3"),
    "causal_mask/segfault": ("crash", "SIGSEGV"),
    "causal_mask/calls_sys_exit": ("fail", "SystemExit"),
    "causal_mask/floods_output": ("fail", "printed"),
    "causal_mask/floods_gigabytes": ("fail", "more than 64 MB of output"),
    "causal_mask/half_done": ("fail", "only CPU so far"),
    "causal_mask/uses_the_reference": ("forbidden", "nn.Transformer.generate_square_subsequent_mask"),
    "causal_mask/changes_default_dtype": ("fail", "default dtype"),
    "causal_mask/allocates_absurd_tensor": ("error", "ran out of memory"),
    "scaled_dot_product_attention/calls_sdpa": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_sdpa_by_alias": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_aten_sdpa": ("forbidden", "scaled_dot_product_attention"),
    "scaled_dot_product_attention/disables_torch_function": ("forbidden", "DisableTorchFunction"),
    "scaled_dot_product_attention/disables_modes": ("forbidden", "_python_dispatch"),
    "scaled_dot_product_attention/swallows_the_refusal": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/returns_nan": ("fail", "contains NaN at index"),
    "scaled_dot_product_attention/modifies_query_in_place": ("fail", "modified its `query` argument in place"),
    "multi_head_attention/calls_mha_forward": ("forbidden", "multi_head_attention_forward"),
}


def run_grader(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "grader.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def broken_verdicts(request) -> dict:
    """Grade every broken file once; only the endless loop gets a short per-test limit."""
    names = list(EXPECTED)
    jobs = [Job(name.split("/")[0], BROKEN / f"{name}.py") for name in names]
    verdicts = {}
    for short in (True, False):
        chosen = [(n, j) for n, j in zip(names, jobs) if (n == "causal_mask/endless_loop") == short]
        results = grade_all(
            [j for _, j in chosen],
            seed=request.config.kata_seed,
            device="cpu",
            limits=Limits(time_limit=120, test_timeout=3 if short else 30),
            workers=default_workers(),
            fork=False,
        )
        verdicts.update(zip([n for n, _ in chosen], results))
    return verdicts


def test_every_broken_file_has_an_expected_verdict():
    assert sorted(f"{p.parent.name}/{p.stem}" for p in BROKEN.glob("*/*.py")) == sorted(EXPECTED)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", EXPECTED)
def test_broken_kata_gets_the_right_verdict(name, broken_verdicts):
    status, words = EXPECTED[name]
    verdict = broken_verdicts[name]
    assert (verdict.status, words in verdict.message) == (status, True), (
        f"{name}: got {verdict.status!r} with message {verdict.message!r}; expected {status!r} mentioning {words!r}"
    )
    assert len(verdict.message) < 1500, "messages are truncated"


@pytest.mark.timeout(120)
def test_a_kata_past_its_wall_clock_limit_is_killed_and_reported():
    engine = ProcessEngine(device="cpu", limits=Limits(time_limit=6, test_timeout=60))
    verdict = engine.grade("causal_mask", BROKEN / "causal_mask" / "endless_loop.py", 1)
    assert verdict.status == "timeout" and "wall-clock" in verdict.message, verdict


@pytest.mark.timeout(300)
def test_json_report_and_exit_status_for_solutions(tmp_path):
    out = tmp_path / "result.json"
    run = run_grader(
        "--impl", "solutions", "--kata", "causal_mask", "--kata", "padding_mask", "--json", str(out), "--device", "cpu"
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
    assert "causal_mask" in run.stdout and "pass" in run.stdout and "x (" in run.stdout


@pytest.mark.timeout(300)
def test_one_broken_kata_does_not_stop_the_others(tmp_path):
    impl = tmp_path / "attempt"
    impl.mkdir()
    (impl / "causal_mask.py").write_text((BROKEN / "causal_mask" / "segfault.py").read_text())
    (impl / "padding_mask.py").write_text((ROOT / "solutions" / "padding_mask.py").read_text())
    out = tmp_path / "result.json"
    run = run_grader(
        "--impl",
        str(impl),
        "--kata",
        "causal_mask",
        "--kata",
        "padding_mask",
        "--no-timing",
        "--json",
        str(out),
        "--device",
        "cpu",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    statuses = {k["name"]: k["status"] for k in json.loads(out.read_text())["katas"]}
    assert statuses == {"causal_mask": "crash", "padding_mask": "pass"}
    assert json.loads(out.read_text())["score"] == 50


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


def test_classify_needs_positive_evidence_for_a_pass():
    """A process that reported every test passed but exited non-zero, or reported no tests, is not a pass."""
    limits = Limits()
    events = [
        Collected(tests={"t1": "t1"}),
        TestReport(nodeid="t1", name="t1", outcome=Outcome.PASSED),
        Finish(exitstatus=0),
    ]
    assert classify("k", events, ProcessEnd(0), "", limits).status == "pass"
    assert classify("k", events, ProcessEnd(1), "", limits).status != "pass"
    assert classify("k", events[:2], ProcessEnd(0), "", limits).status == "crash"
    nothing = [Collected(tests={}), Finish(exitstatus=5)]
    assert classify("k", nothing, ProcessEnd(5), "", limits).status != "pass"
    skipped = [events[0], TestReport(nodeid="t1", name="t1", outcome=Outcome.SKIPPED, message="learner skipped it"), events[2]]
    assert classify("k", skipped, ProcessEnd(0), "", limits).status == "fail"
    todo = [events[0], TestReport(nodeid="t1", name="t1", outcome=Outcome.FAILED, kind=ErrorKind.NOT_IMPLEMENTED), events[2]]
    assert classify("k", todo, ProcessEnd(1), "", limits).status == "todo"


def test_stub_generation_keeps_todo_lines_and_raises():
    solution = (
        'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    # TODO: double it.\n'
        "    y = 2 * x  # secret\n    return y\n    ### END SOLUTION\n"
    )
    assert (
        make_stub(solution)
        == 'def f(x):\n    """Doc."""\n    # TODO: double it.\n    raise NotImplementedError\n'
    )


def test_readme_kata_table_matches_info_toml():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index("<!-- kata-table"), readme.index("<!-- /kata-table -->")
    shown = readme[start:end].split("\n", 1)[1].strip()
    assert shown == kata_table(load_catalog()), (
        "README's kata table is out of date: paste the output of `python grader.py table`"
    )

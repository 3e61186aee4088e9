"""Kata files broken in every way a half-written (or too clever) kata can be, each with the
verdict it must get, by both engines, while the grader goes on to grade the rest.

tests/broken/<kata>/<name>.py; each file's docstring says what it does. The comments
below name the hole of the engine issue a file proves closed."""

import atexit
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from pool import Batch
from pool import verdict as graded

from judge.limits import Limits
from judge.paths import ROOT
from judge.scheduling import Job
from judge.testing.checks import NO_GPU

BROKEN = ROOT / "tests" / "broken"
EXPECTED = {  # tests/broken/<kata>/<file> -> (status, words its message must contain)
    "causal_mask/syntax_error": ("error", "SyntaxError"),
    "causal_mask/raises_at_import": ("error", "IndexError"),
    "causal_mask/missing_symbol": ("error", "defines no `causal_mask`"),
    "causal_mask/endless_loop": ("timeout", "per-test limit of 1 s"),
    "causal_mask/ignores_the_alarm": ("timeout", "per-test limit of 1 s"),  # hole 13: limit held from outside
    "causal_mask/hangs_at_import": ("timeout", "importing hangs_at_import.py did not finish"),
    "causal_mask/exits_interpreter": ("crash", "exit code 3"),
    "causal_mask/segfault": ("crash", "SIGSEGV"),
    "causal_mask/reaches_memory_with_ctypes": ("forbidden", "uses ctypes"),  # issue 26: no raw memory
    "causal_mask/slow_but_correct": ("pass", "tests passed"),  # issue 20: see tests/test_grader.py
    "causal_mask/paints_the_terminal": ("fail", "\\x1b[2J\\x1b[H\\x1b[32m"),  # issue 26: escapes shown as text
    "causal_mask/calls_sys_exit": ("fail", "SystemExit"),
    "causal_mask/floods_output": ("pass", "tests passed"),  # issue 15: a print is shown, never counted
    "causal_mask/floods_gigabytes": ("fail", "more than 64 MB of output"),
    "causal_mask/half_done": ("fail", "only CPU so far"),
    "causal_mask/skips_like_the_grader": ("fail", "CUDA is not available"),  # hole 1: a kata's skip is no pass
    "causal_mask/uses_the_reference": ("forbidden", "nn.Transformer.generate_square_subsequent_mask"),
    "causal_mask/reference_in_a_default_argument": ("forbidden", "generate_square_subsequent_mask"),
    "causal_mask/materialises_causal_bias": ("forbidden", "torch.nn.attention.bias.causal_upper_left"),
    "causal_mask/changes_default_dtype": ("fail", "default dtype"),
    "causal_mask/changes_default_dtype_at_import": (
        "fail",
        "importing changes_default_dtype_at_import.py changed",
    ),  # hole 11
    "causal_mask/allocates_absurd_tensor": ("error", "ran out of memory"),
    "padding_mask/always_on_the_cpu": ("pass", "all 5 tests passed"),  # hole 2: see test below
    "ring_all_reduce/calls_all_reduce": ("forbidden", "dist.all_reduce"),  # issue 25: at c10d's operators
    "ring_all_reduce/calls_the_process_group": ("forbidden", "dist.all_reduce"),
    "ring_all_reduce/all_gathers_then_sums": ("forbidden", "dist.all_gather_into_tensor"),
    "ring_all_reduce/functional_collective": ("forbidden", "torch.ops._c10d_functional.all_reduce"),
    "ring_all_reduce/receives_from_anyone": ("forbidden", "dist.recv without a source"),
    "ring_all_reduce/opens_a_tcp_socket": ("fail", "Operation not permitted"),  # no new socket in a rank
    "zero_sharded_optimizer/subclasses_zero_redundancy": ("forbidden", "ZeroRedundancyOptimizer"),  # refused if called
    "zero_sharded_optimizer/shards_with_the_shard_package": ("forbidden", "_shard.sharded_optim.ShardedOptimizer"),
    "scaled_dot_product_attention/calls_sdpa": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_sdpa_by_alias": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_aten_sdpa": ("forbidden", "scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_mha_forward": ("forbidden", "multi_head_attention_forward"),  # hole 10
    "scaled_dot_product_attention/calls_native_mha": ("forbidden", "_native_multi_head_attention"),  # hole 10
    "scaled_dot_product_attention/disables_torch_function": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/disables_modes": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/swallows_the_refusal": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/returns_nan": ("fail", "with NaN at index"),
    "scaled_dot_product_attention/modifies_query_in_place": ("fail", "modified its `query` argument in place"),
    "multi_head_attention/calls_mha_forward": ("forbidden", "multi_head_attention_forward"),
    "encoder_layer/borrows_pytorch_feed_forward": ("forbidden", "nn.TransformerEncoderLayer._ff_block"),  # hole 12
    "attention_backward/calls_grad_fn_by_hand": ("forbidden", "turns autograd on"),  # hole 9
    "attention_backward/engine_by_computed_name": ("forbidden", "calls autograd"),  # hole 9
    "attention_backward/softmax_backward_kernel": ("forbidden", "_softmax_backward_data"),  # hole 9
    "attention_function/backward_calls_autograd": ("forbidden", "autograd"),  # hole 3
    # issue 16: the guard holds in threads, for aliases bound at import, through computed names
    "scaled_dot_product_attention/calls_sdpa_in_a_thread": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_sdpa_in_a_pool_started_at_import": (
        "forbidden",
        "F.scaled_dot_product_attention",
    ),
    "scaled_dot_product_attention/disables_modes_by_computed_name": ("forbidden", "uses importlib"),
    "attention_backward/grad_in_a_default_argument": ("forbidden", "autograd"),
    # issue 16: nothing escapes the grade's process tree, and no kata harms another's grade
    "causal_mask/leaves_a_daemon": ("error", "Operation not permitted"),  # issue 26: no fork in the kata process
    "causal_mask/kills_its_parent": ("fail", "Operation not permitted"),  # issue 26: signals to itself only
    "causal_mask/kills_the_fork_server": ("fail", "Operation not permitted"),
    "causal_mask/deletes_its_own_file": ("error", "Permission denied"),  # issue 26: writes only to its temp dir
    "causal_mask/leaves_a_thread_running": ("fail", "thread(s) running"),
    # issue 16: the kata runs in a process of its own; the tests, references and results file elsewhere
    "causal_mask/patches_the_comparison": ("fail", "tests failed"),
    "causal_mask/bends_the_reference": ("fail", "tests failed"),
    "causal_mask/writes_the_results_file": ("error", "Permission denied"),  # issue 26: writes only its temp dir
    "scaled_dot_product_attention/reads_the_expected_from_the_caller": ("fail", "tests failed"),
    # issue 26: removal reaches every way to an operator (the red team's delegations)
    "scaled_dot_product_attention/calls_sdpa_in_a_custom_op": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_sdpa_in_torchscript": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/calls_sdpa_through_wrapped": ("forbidden", "F.scaled_dot_product_attention"),
    "scaled_dot_product_attention/patches_the_judge": ("forbidden", "F.scaled_dot_product_attention"),
    "rms_norm/calls_rms_norm_in_torch_function": ("forbidden", "F.rms_norm"),
    "softmax/calls_softmax_in_apply_": ("forbidden", "torch.softmax"),
    "softmax/flash_logsumexp": ("forbidden", "_scaled_dot_product_flash_attention_for_cpu"),
    "cross_entropy/flash_logsumexp": ("forbidden", "_scaled_dot_product_flash_attention_for_cpu"),
    "layer_norm/group_norm_with_one_group": ("forbidden", "write the layer norm yourself"),
    "attention_backward/autograd_in_placeholders": ("forbidden", "turns autograd on"),
    # issue 26: tampering gets no pass: inputs judged by value, nothing but the temp dir written,
    # no other process reached, no tracer hidden from
    "scaled_dot_product_attention/modifies_query_through_numpy": ("fail", "modified its `query` argument in place"),
    "causal_mask/plants_a_module_in_torch": ("error", "Permission denied"),
    "causal_mask/writes_the_repository": ("error", "Permission denied"),
    "causal_mask/writes_the_judge_through_proc": ("error", "Permission denied: '/proc/"),
    "causal_mask/leaves_a_raw_thread_running": ("fail", "thread(s) running"),
    "flash_attention/scores_in_a_thread": ("fail", "may start no thread"),
    "flash_attention/scores_in_a_custom_op": ("fail", "an operator of its own"),
    # issue 26: a fault is its own file's verdict only (graded beside the others, both cores)
    "causal_mask/takes_3gb_per_call": ("error", "ran out of memory"),
}
SHORT = (
    "causal_mask/endless_loop",
    "causal_mask/ignores_the_alarm",
    "causal_mask/hangs_at_import",
)  # graded with a per-test limit of SHORT_LIMIT: each burns (or sleeps) it whole, in both engines
SHORT_LIMIT = 1
# Also graded by the process engine, which must agree: every way a process can end, is stopped
# at a limit or leaves others behind, where the engines differ (how the judging process starts,
# who forks the kata process, who watches and clears the process tree). Not the verdicts that
# the judging process decides the same way under both (a load error, a skip, a thread left
# running: causal_mask/syntax_error, skips_like_the_grader, leaves_a_thread_running until
# 2026-11-29): a fresh process costs 4 CPU-s here, a fork-engine grade 0.2.
BOTH_ENGINES = (
    "causal_mask/endless_loop",
    "causal_mask/ignores_the_alarm",
    "causal_mask/hangs_at_import",
    "causal_mask/exits_interpreter",
    "causal_mask/segfault",
    "causal_mask/floods_gigabytes",
    "causal_mask/allocates_absurd_tensor",
    "causal_mask/kills_its_parent",
    "causal_mask/leaves_a_daemon",
)


# The walls behind the sandbox, proven with it off (KATAS_SANDBOX=off): where a platform lacks
# namespaces, Landlock or seccomp, the watcher still kills every process a kata leaves, a kata
# that kills its parent is a crash and the others are graded on, and it deletes only a copy.
WITHOUT_SANDBOX = {
    "causal_mask/leaves_a_daemon": ("pass", "tests passed"),  # see test below: the daemon is dead
    "causal_mask/kills_its_parent": ("crash", "watching over the kata was killed"),
    "causal_mask/kills_the_fork_server": ("crash", "the process grading it died"),
    "causal_mask/deletes_its_own_file": ("pass", "tests passed"),  # graded from a private copy
}


DAEMONS = Path(tempfile.mkdtemp(prefix="katas-daemons-"))  # where leaves_a_daemon notes each daemon's pid
atexit.register(shutil.rmtree, DAEMONS, ignore_errors=True)


def batches(tag: str, names, seed: int, *, fork: bool, expected: dict, env: dict) -> list[Batch]:
    """Each file up to its first failed test (its verdict is settled there), the SHORT ones
    with a per-test limit of SHORT_LIMIT in a batch of their own."""
    found = []
    for short in (True, False):
        jobs = {
            name: Job(name.split("/")[0], BROKEN / f"{name}.py", first_failure=expected[name][0] != "pass")
            for name in names
            if (name in SHORT) == short
        }
        limits = Limits(time_limit=120, test_timeout=SHORT_LIMIT if short else 30)
        found.append(Batch(f"{tag} (short)" if short else tag, jobs, limits, seed, fork=fork, env=env))
    return found


def grading_plan(items, config) -> list[Batch]:
    """Every broken file by the fork engine; those of BOTH_ENGINES by the process engine too;
    those of WITHOUT_SANDBOX by both with the sandbox off (tests/pool.py)."""
    seed, env = config.kata_seed, {"KATAS_BROKEN_PIDS": str(DAEMONS)}
    unwalled, both = env | {"KATAS_SANDBOX": "off"}, [name for name in WITHOUT_SANDBOX if name in BOTH_ENGINES]
    return [
        *batches("broken", EXPECTED, seed, fork=True, expected=EXPECTED, env=env),
        *batches("broken, fresh processes", BOTH_ENGINES, seed, fork=False, expected=EXPECTED, env=env),
        *batches("unwalled", WITHOUT_SANDBOX, seed, fork=True, expected=WITHOUT_SANDBOX, env=unwalled),
        *batches("unwalled, fresh processes", both, seed, fork=False, expected=WITHOUT_SANDBOX, env=unwalled),
    ]


class Graded:
    """The verdicts of one of grading_plan's tags, by file name."""

    def __init__(self, tag: str):
        self.tag = tag

    def __getitem__(self, name: str):
        return graded(f"{self.tag} (short)" if name in SHORT else self.tag, name)


@pytest.fixture
def verdicts() -> Graded:
    return Graded("broken")


@pytest.fixture
def process_verdicts() -> Graded:
    return Graded("broken, fresh processes")


@pytest.fixture
def unwalled_verdicts() -> dict:
    return {"fork": Graded("unwalled"), "process": Graded("unwalled, fresh processes")}


@pytest.fixture
def daemons() -> Path:
    return DAEMONS


def test_every_broken_file_has_an_expected_verdict():
    assert sorted(f"{p.parent.name}/{p.stem}" for p in BROKEN.glob("*/*.py")) == sorted(EXPECTED)


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
@pytest.mark.parametrize("name", EXPECTED)
def test_broken_kata_gets_the_right_verdict(name, verdicts):
    status, words = EXPECTED[name]
    verdict = verdicts[name]
    assert (verdict.status, words in verdict.message) == (status, True), (
        f"{name}: got {verdict.status!r} with message {verdict.message!r}; expected {status!r} mentioning {words!r}"
    )
    assert len(verdict.message) < 1500, "messages are truncated"
    assert "\x1b" not in verdict.message + "".join(f["message"] for f in verdict.failures), "no terminal escape reaches the table"


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
@pytest.mark.parametrize("name", BOTH_ENGINES)
def test_the_process_engine_gives_the_same_verdict(name, verdicts, process_verdicts):
    fork, process = verdicts[name], process_verdicts[name]
    assert (process.status, process.passed, process.total, without_load(process.message)) == (
        fork.status,
        fork.passed,
        fork.total,
        without_load(fork.message),
    ), f"{name}: fork engine {fork.status} ({fork.message}); process engine {process.status} ({process.message})"


def without_load(message: str) -> str:
    """A message without what depends on the machine's load at the time (the CPU waits of a timeout)."""
    return re.sub(r" \(the machine was busy: .*? did not count\)", "", message)


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
def test_a_debug_print_is_shown_truncated_and_not_counted(verdicts):
    verdict = verdicts["causal_mask/floods_output"]
    assert verdict.status == "pass" and verdict.passed == verdict.total, verdict
    assert verdict.printed.startswith("debug debug") and len(verdict.printed) < 400, verdict.printed[:500]


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
def test_a_device_check_this_machine_cannot_decide_is_reported_not_passed(verdicts):
    """Hole 2: on the "meta" stand-in for a GPU, a kata that reads tensor values cannot be
    judged; the check is left out of the count and listed, never passed."""
    verdict = verdicts["padding_mask/always_on_the_cpu"]
    assert verdict.total == 5 and verdict.passed == 5, verdict
    assert [u["reason"] for u in verdict.unjudged] == [NO_GPU], verdict.unjudged


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
@pytest.mark.parametrize(
    "name, engine",
    [(name, "fork") for name in WITHOUT_SANDBOX] + [(name, "process") for name in WITHOUT_SANDBOX if name in BOTH_ENGINES],
)
def test_without_the_sandbox_the_other_walls_still_hold(name, engine, unwalled_verdicts):
    status, words = WITHOUT_SANDBOX[name]
    verdict = unwalled_verdicts[engine][name]
    assert (verdict.status, words in verdict.message) == (status, True), (
        f"{name}, {engine} engine, no sandbox: got {verdict.status!r} with message {verdict.message!r}; "
        f"expected {status!r} mentioning {words!r}"
    )


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
def test_a_daemon_the_kata_starts_does_not_outlive_its_grade(verdicts, unwalled_verdicts, daemons):
    """In the sandbox a kata cannot fork at all. Without it, setsid() and a double fork take a
    process out of the kata's group and away from its parent; the watcher of the grade (a
    child subreaper) still kills it when the grade ends."""
    assert verdicts["causal_mask/leaves_a_daemon"].status == "error"
    pids = [int(note.name) for note in daemons.iterdir()]
    assert len(pids) >= 2, "the daemon of each engine's unsandboxed grade noted its pid"
    assert not [pid for pid in pids if alive(pid)], f"daemons still alive after their grades: {pids}"


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
def test_a_kata_that_deletes_its_file_deletes_only_its_private_copy(verdicts, unwalled_verdicts):
    assert verdicts["causal_mask/deletes_its_own_file"].status == "error"  # the sandbox refuses the write
    assert unwalled_verdicts["fork"]["causal_mask/deletes_its_own_file"].status == "pass"
    assert (BROKEN / "causal_mask" / "deletes_its_own_file.py").is_file()


@pytest.mark.timeout(900)  # it may wait for the pool (tests/pool.py)
def test_a_kata_cannot_write_the_repository_the_venv_or_the_judge_even_as_root(verdicts):
    """Issue 26: each of these files tries the write at import, as the user the grader runs as
    (root on CI); the sandbox refuses it, and nothing it meant to write is there."""
    for name in ("writes_the_repository", "plants_a_module_in_torch", "writes_the_judge_through_proc"):
        verdict = verdicts[f"causal_mask/{name}"]
        assert verdict.status == "error" and "Permission denied" in verdict.message, (name, verdict.message)
    assert not (ROOT / "tests" / "written_by_a_kata.py").exists()
    assert not (Path(torch.__file__).parent / "_planted_by_a_kata.py").exists()

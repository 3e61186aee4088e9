"""Correct math that breaks a stated convention, graded as it should be: every core test
passes, and the only failures are the conventions the file names.

Each file is tests/conventions_only/<kata>/<name>.py: real public code glued to the kata's
signature with its math unchanged (its docstring says whose, and what it breaks). Issue 21
found such code failed for the wrong reasons: a float32 softmax failed core tests in
grouped_query_attention, and an autocast block on the meta stand-in failed a device check.
Each file is graded on several seeds: a convention's verdict never depends on the draw.
"""

import pytest

from judge.limits import Limits
from judge.paths import ROOT
from judge.protocol import SEVERAL, SINGLE
from judge.scheduling import Job
from pool import Batch
from pool import verdict as graded

FOLDER = ROOT / "tests" / "conventions_only"
SEEDS = 3
FLOAT64 = "float64 inputs are computed in float64 throughout"
EXPECTED = {  # <kata>/<file> -> {the name of each test it fails: words its message must contain}
    "grouped_query_attention/hf_llama_eager_attention": {FLOAT64: "float64"},
    "llama_block/hf_llama_decoder_layer": {FLOAT64: "float64"},
    "rotary_embedding/meta_llama_complex": {
        FLOAT64: "float64",
        "x may have a strided last dimension": "x=`last dim strided`",  # the case it raised in
    },
}


def test_every_file_is_expected():
    found = {f"{path.parent.name}/{path.stem}" for path in FOLDER.glob("*/*.py")}
    assert found == set(EXPECTED), f"files and EXPECTED differ: {sorted(found ^ set(EXPECTED))}"


def grading_plan(items, config) -> list[Batch]:
    limits = Limits(time_limit=120, test_timeout=60)
    jobs = {name: Job(name.split("/")[0], FOLDER / f"{name}.py") for name in EXPECTED}
    return [Batch(f"conventions only, seed +{n}", jobs, limits, config.kata_seed + n) for n in range(SEEDS)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(SEEDS), ids=lambda n: f"seed+{n}")
@pytest.mark.parametrize("name", EXPECTED)
def test_only_the_named_conventions_fail(name, seed):
    verdict = graded(f"conventions only, seed +{seed}", name)
    core, conventions = verdict.tiers.get("core", {}), verdict.tiers.get("conventions", {})
    assert verdict.status == "fail" and core and core["passed"] == core["total"], (
        f"{name} was graded {verdict.status!r} with {core} core tests passed: its math is right, "
        f"so every core test must pass: {verdict.message}"
    )
    failed = {failure["name"]: failure["message"] for failure in verdict.failures}
    assert sorted(failed) == sorted(EXPECTED[name]), f"{name} failed {sorted(failed)}, not {sorted(EXPECTED[name])}"
    for test, words in EXPECTED[name].items():
        assert words in failed[test], f"{name}: {test}: the message lacks {words!r}: {failed[test]}"
    assert conventions["total"] - conventions["passed"] == len(EXPECTED[name])
    named = [line for line in verdict.diagnosis if line.startswith((SINGLE, SEVERAL))]
    assert not named, f"correct math was diagnosed as a slip: {named}"

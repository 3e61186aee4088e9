"""A kata's tests split over several judging processes (judge.shards): the shards' runs put
back together read as one run, and a sharded grade gives the verdict a whole one gives."""

import json
import re
import textwrap

import pytest
from scripts import run_script
from sleeper import sleeper

from judge import shards
from judge.isolation import ProcessEnd
from judge.paths import ROOT
from judge.protocol import Collected, Finish, Outcome, TestReport
from judge.stubs import make_stub


def collected(*nodeids: str) -> Collected:
    return Collected(tests={n: f"test {n}" for n in nodeids}, tiers={n: "core" for n in nodeids})


def report(nodeid: str, outcome: Outcome = Outcome.PASSED) -> TestReport:
    return TestReport(nodeid=nodeid, name=f"test {nodeid}", outcome=outcome)


def test_shard_i_of_n_runs_every_nth_test_from_the_ith():
    assert shards.select(list("abcde"), 0, 2) == ["a", "c", "e"]
    assert shards.select(list("abcde"), 1, 2) == ["b", "d"]
    assert shards.parse(shards.option(1, 3)) == (1, 3)


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b"])
def test_a_malformed_shard_is_refused(text):
    with pytest.raises(ValueError):
        shards.parse(text)


def test_the_runs_read_as_one_in_the_order_the_tests_were_collected():
    first = [collected("a", "c", "e"), report("a"), report("c"), report("e"), Finish(0)]
    second = [collected("b", "d"), report("b"), report("d", Outcome.FAILED), Finish(1)]
    events, decider = shards.combine([(first, ProcessEnd(0)), (second, ProcessEnd(1))])
    assert list(events[0].tests) == ["a", "b", "c", "d", "e"]
    assert [e.nodeid for e in events[1:-1]] == ["a", "b", "c", "d", "e"]
    assert events[-1] == Finish(1) and decider == 1  # the failing run's end speaks for both


def test_a_run_that_died_decides_and_no_finish_is_made_up():
    first = [collected("a", "c"), report("a"), report("c"), Finish(0)]
    second = [collected("b", "d"), report("b")]  # killed during d
    events, decider = shards.combine([(first, ProcessEnd(0)), (second, ProcessEnd(-11))])
    assert decider == 1
    assert not any(isinstance(e, Finish) for e in events)
    unreported = [n for n in events[0].tests if n not in {e.nodeid for e in events[1:]}]
    assert unreported == ["d"]  # what verdicts.classify names as running when it died


def test_a_run_that_collected_nothing_is_neither_a_failure_nor_the_decider():
    first = [collected("a"), report("a"), Finish(0)]
    second = [collected(), Finish(shards.NOTHING_COLLECTED)]
    events, decider = shards.combine([(first, ProcessEnd(0)), (second, ProcessEnd(shards.NOTHING_COLLECTED))])
    assert decider == 0 and events[-1] == Finish(0)


def test_a_run_that_never_collected_stands_alone():
    first = [collected("a"), report("a"), Finish(0)]
    second: list = []  # died before its tests were collected
    events, decider = shards.combine([(first, ProcessEnd(0)), (second, ProcessEnd(1))])
    assert (events, decider) == ([], 1)


BUSY = re.compile(r" \(the machine was busy: [^)]*\)$")
SHARDED_AND_WHOLE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from judge.engines import ForkEngine
    from judge.limits import Limits
    out, engines = {}, [ForkEngine(device="cpu", shards=count) for count in (1, 2)]
    for label, kata, path, test_timeout in json.loads(sys.argv[2]):
        verdicts = []
        for engine in engines:
            engine.limits = Limits(test_timeout=test_timeout)
            result = engine.grade(kata, Path(path), 5)
            verdicts.append([str(result.status), result.passed, result.total, result.message, result.diagnosis])
        out[label] = verdicts
    print(json.dumps(out))
""")


def test_a_sharded_grade_gives_the_verdict_of_a_whole_one(tmp_path):
    """Each way a grade ends, sharded in two and whole, by the fork engine in a fresh process
    (as make watch runs it). The kata file's path differs by shard and is left out."""
    wrong, stub = tmp_path / "causal_mask.py", tmp_path / "decoder_layer.py"
    sleeps = sleeper(tmp_path / "asleep")
    wrong.write_text((ROOT / "solutions" / "causal_mask.py").read_text().replace("diagonal=1", "diagonal=0"))
    stub.write_text(make_stub((ROOT / "solutions" / "decoder_layer.py").read_text()))
    broken = ROOT / "tests" / "broken" / "causal_mask"
    cases = [
        ("pass", "multi_head_attention", str(ROOT / "solutions" / "multi_head_attention.py"), 20),
        ("todo", "decoder_layer", str(stub), 20),
        ("fail", "causal_mask", str(wrong), 20),
        ("crash", "causal_mask", str(broken / "segfault.py"), 20),
        ("timeout", "causal_mask", str(sleeps), 1),  # asleep past its limit: no CPU burnt in 3 processes
    ]
    for label, verdicts in run_script(SHARDED_AND_WHOLE, json.dumps(cases)).items():
        for verdict in verdicts:  # how long a busy machine kept it waiting is the hour's, not the grade's
            verdict[3] = BUSY.sub("", verdict[3])
        whole, sharded = verdicts
        assert whole[0] == label, (label, whole)
        assert sharded == whole, label

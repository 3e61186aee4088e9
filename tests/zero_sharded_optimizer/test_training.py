"""zero_sharded_optimizer, the math: every case of the table (the named edge cases and two
draws) played on worlds of 1 to 4 ranks, each rank on its own micro-batch, against the
unsharded optimizer stepped on the whole batch in float64; then where the state lives.

Both tests judge the same table from one seed (`table`), so its worlds are played once a grade
(common.play keeps them): about a second of the kata's CPU, not two."""

import random
import zlib

import pytest

from judge.testing.tiers import core

from .common import SPEC, play, reference_trace
from .judging import check_balance, check_owners, check_state, check_step, check_structure, replay_of


@pytest.fixture
def table(request) -> tuple[list, int]:
    """(the cases, the seed of their stories): the same for both tests, derived from the run's
    seed (as the per-test seed is, so --seed replays it)."""
    seed = zlib.crc32(f"{request.config.kata_seed}:{request.module.__name__}".encode())
    return SPEC.cases.cases(random.Random(seed)), seed


@core(zh="每一步之后，每个 rank 上的每个参数都与不分片的优化器在整批数据上得到的一致")
def test_every_rank_ends_every_step_with_the_unsharded_optimizers_parameters(kata, table):
    for case, story, traces in play(kata, *table):
        reference, _, _ = reference_trace(story)
        for step in range(1, story["steps"] + 1):
            with case.judged(), SPEC.diagnosing(replay_of(story, step), sizes=case):
                check_step(story, traces, reference, step)


@core(zh="每个参数恰有一个属主，负载均衡，优化器状态只在属主上且与不分片的一致")
def test_each_parameter_has_one_owner_and_its_state_lives_there_alone(kata, table):
    for case, story, traces in play(kata, *table):
        reference, state, numels = reference_trace(story)
        replay = replay_of(story, groups=reference["groups"], numels=numels)
        with case.judged(), SPEC.diagnosing(replay, sizes=case):
            check_structure(story, traces, reference)
            check_owners(story, traces, reference["groups"])
            check_balance(story, traces, numels, reference["groups"])
            check_state(story, traces, state)

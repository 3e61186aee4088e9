"""batch_norm: train x3, eval, train against nn.BatchNorm, call by call; the SPEC, scenarios,
references, tolerances and checks are in common.py."""

import torch

from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import (
    CASES,
    FULL,
    SPEC,  # noqa: F401 - the kata's spec, for the kata fixture
    judge_story,
)


@core(zh="训练 3 次、评估 1 次、再训练 1 次，每次的输出、梯度与缓冲区都与 nn.BatchNorm 一致")
@dtypes(*FULL)
def test_train_eval_train_matches_nn_batchnorm_call_by_call(kata, rng, gen, dtype):
    """Outputs, gradients of x, weight and bias, and the buffers after every call."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            judge_story(kata, gen, case, dtype)

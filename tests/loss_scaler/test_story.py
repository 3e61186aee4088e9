"""loss_scaler: the story against GradScaler (common.judge_story), the core: every case of the
table, edge cases first (in float64), then random scalers and scripts in float32 and float64;
each step's scaled loss, gradients, optimizer calls, parameters, scales and growth tracker."""

import torch

from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import CASES, FULL, SPEC, judge_story, recipe  # noqa: F401 - SPEC: the kata fixture reads it


@core(zh="每一步都与 GradScaler 一致：缩放、反缩放、跳过的步、回退与增长")
@dtypes(*FULL)
def test_every_step_matches_grad_scaler(kata, rng, gen, dtype):
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            judge_story(kata, recipe(gen, case, dtype))

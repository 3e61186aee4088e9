"""adamw, the math: every param after every step against torch.optim.AdamW(foreach=False)
in float64, the state_dict's moments and step counts, PyTorch's AdamW continuing from the
learner's state_dict, and the defaults (see common.py)."""

import torch

from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import SPEC  # noqa: F401 - read by the kata fixture
from .common import CASES, FULL, Story, check_round_trip, check_state_dict, check_steps


@core(zh="每一步之后的参数都与 torch.optim.AdamW 一致")
@dtypes(*FULL)
def test_every_step_matches_pytorchs_adamw(kata, rng, gen, dtype):
    for case in CASES.cases(rng):
        with case.judged():
            check_steps(kata, Story(gen, case, dtype))


@core(zh="state_dict 与 PyTorch 的一致：同样的键、矩估计和步数")
def test_the_state_dict_holds_pytorchs_moments_and_step_counts(kata, rng, gen):
    for case in CASES.cases(rng):
        with case.judged():
            check_state_dict(kata, Story(gen, case, torch.float32))


@core(zh="torch.optim.AdamW 载入你的 state_dict 后能原样继续")
def test_pytorchs_adamw_continues_from_the_state_dict(kata, rng, gen):
    for case in (*CASES.edges[2:4], *CASES.random(rng, 2)):
        with case.judged():
            story = Story(gen, case, torch.float64, steps=case["steps"] + 2)
            check_round_trip(kata, story, case["steps"])


@core(zh="默认超参数与 torch.optim.AdamW 相同（weight_decay 为 1e-2）")
def test_the_defaults_are_pytorchs_adamws(kata, rng, gen):
    """AdamW(params) with no option: its param_groups say lr 1e-3, betas (0.9, 0.999), eps 1e-8,
    weight_decay 1e-2, amsgrad False, and its steps are PyTorch's."""
    case = CASES.random(rng, 1)[0] | {"options": {}, "groups": None, "missing": []}
    with case.judged():
        story = Story(gen, case, torch.float64)
        check_state_dict(kata, story)
        check_steps(kata, story)



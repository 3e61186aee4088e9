"""grpo: group_advantages and grpo_loss, judged against the kata's formulas in float64.

PyTorch has no GRPO, so the references are the formulas of the GRPO paper (DeepSeekMath,
section 4.1) as TRL's GRPOTrainer computes them (loss type "grpo"), written here in float64
with PyTorch's own pieces where one exists (torch.std for the unbiased std, torch.clamp,
torch.min), on the inputs as the kata gets them (rounded to the dtype under test, then
converted exactly), and rounded to that dtype.

A case is N prompts with G completions each (B = N * G rows) of T tokens. Rewards are
drawn per group, the kinds cycling from group to group: small rewards (spread 0.01, where
eps = 1e-4 changes the result by 1%), a group whose rewards are all equal (0, 1, 0.5 or -1:
std 0, advantages 0), 0/1 correctness rewards, and large ones (spread 10). Per token,
logps lie in (-3.05, -0.05); logps - old_logps is uniform in [-1, 1] (ratios from 0.37 to
2.7, far outside the clip range on both sides), exactly 0 on a fifth of the tokens (an
on-policy step), and kept 1e-3 away from log(1 +- clip_eps), where the gradient jumps;
ref_logps = logps + N(0, 0.5^2). Advantages are N(0, 1) per row, the first positive and the
second negative. Masks are right-padded (with holes inside the completions in one edge case
and some random draws, never emptying a row), every row of its own length where T allows;
padded positions hold ordinary finite values. Values are judged in float64 and float32
(the gradient of logps too), with float and bool masks. Empty rows (a mask all 0) are a
convention, judged by a test of their own, as is a ref_logps holding -inf with beta = 0.

Every call runs in the kata process through FunctionKata (a scenario, on copies of the
arguments); the one observation FunctionKata has no form for, the inputs as a call with a
logps that requires grad left them, is the scenario `called_with_logps_requiring_grad`.
"""

import math

import torch

from judge.forbidden import NONE
from judge.language import pick
from judge.testing.checks import assert_close
from judge.testing.functions import FunctionKata, assert_inputs_unchanged, computation_eps
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases show first in it
CLIP_EPS, BETA, EPS = 0.2, 0.04, 1e-4  # the defaults
CONSTANTS = (0.0, 1.0, 0.5, -1.0)  # a group's equal rewards: exact in float32, so is their mean
REWARD_KINDS = ("small", "constant", "binary", "large")  # cycled over the groups of a case
BOUNDARY_GAP = 1e-3  # how far logps - old_logps stays from log(1 +- clip_eps)

# --------------------------------------------------------------------------- tolerances
#
# Measured over 100 seeds x every case of every test's kind (the 5 edge cases and 3 random
# draws; default, random and zero clip_eps / beta; float and bool masks; the default and
# explicit eps), the solution and both variants (loops over groups and rows with the clip
# chosen by the advantage's sign; a flat form with index_add by group id and einsum), worst
# error, and as a fraction of the tolerance below:
#   the loss (a 0-d tensor, |loss| up to about 2): float64 3.3e-16 (0.17), float32 2.4e-7 (0.14);
#   the advantages (see advantage_tolerance): float64 1.3e-15 (0.13), float32 3.6e-7 (0.093);
#     a variance taken as E[r^2] - E[r]^2 (cancels badly, yet honest): 0.34 and 0.52;
#   the gradient of logps, per unit of its largest element: float64 0 (every style rounds
#   alike), float32 2.4e-7 (0.18).
# A float64 input computed through float32 is off by about 1e-7: 1e7 times the float64
# tolerances. The core tier judges float64 results with float32's tolerances (see
# FLOAT64_RULE); the float64 rule's test holds them to float64's.
LOSS_TOLERANCES = per_dtype(float64=(2e-15, 2e-15), float32=(1e-6, 1e-6))
ADVANTAGE_ROUNDING = 8


def advantage_tolerance(rewards: torch.Tensor, group_size: int, eps: float, *, float64_throughout=False) -> dict:
    """(reward - mean) cancels: it is off by about eps(dtype) * |reward|, which the division
    by (std + eps) magnifies. atol = ADVANTAGE_ROUNDING * eps(dtype) times the worst
    conditioning max|reward| / (std + eps) of a group (at least 1), over the groups whose
    rewards are not all equal (equal rewards, exact in float32, give exactly 0); rtol the
    same number of eps (the result's own rounding). eps(dtype): float32's for a float64
    result unless float64_throughout (see FLOAT64_RULE)."""
    grouped = rewards.detach().double().cpu().reshape(-1, group_size)
    std = grouped.std(dim=1)
    conditioning = grouped.abs().amax(dim=1) / (std + eps)
    varied = conditioning[std > 0]
    scale = max(1.0, float(varied.max())) if varied.numel() else 1.0
    rounding = ADVANTAGE_ROUNDING * computation_eps(core_dtype(rewards.dtype, float64_throughout))
    return {"rtol": rounding, "atol": rounding * scale}


GRADIENT_RELATIVE = {torch.float64: 2e-15, torch.float32: 1e-6}  # atol per unit of the largest |gradient|


def gradient_tolerance(expected: torch.Tensor, *, float64_throughout=False) -> dict:
    scale = float(expected.abs().max()) or 1.0
    relative = GRADIENT_RELATIVE[core_dtype(expected.dtype, float64_throughout)]
    return {"rtol": relative, "atol": relative * scale}


# --------------------------------------------------------------------------- the case table
#
# Sizes: N prompts, G completions per prompt (B = N * G rows), T tokens; holes: whether some
# rows' masks have zeros inside their completion (never a whole row: empty rows are the
# convention test's).

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    # groups of 2 (the smallest), three reward kinds, lengths 1..7
    edge("groups of 2, rows of different lengths", "每组 2 个，各行长度不同",
         N=3, G=2, T=7, holes=False),
    # B = T: an advantage applied per token position instead of per row still broadcasts
    edge("B = T = 6: each advantage goes with its row, not a token position",
         "B = T = 6：每个优势值跟着它的行走，而不是跟着某个 token 位置",
         N=2, G=3, T=6, holes=False),
    edge("one prompt (N = 1), a group of 8", "只有一个提示词（N = 1），一组 8 个",
         N=1, G=8, T=5, holes=False),
    edge("one token per completion (T = 1)", "每个补全只有一个 token（T = 1）",
         N=3, G=4, T=1, holes=False),
    edge("odd sizes, every reward kind, holes in the masks", "奇数尺寸，每种奖励都有，掩码中有空洞",
         N=5, G=5, T=9, holes=True),
)
# fmt: on


def hidden_sizes(rng, count: int) -> list[dict]:
    """N from 1 to 6, G from 2 to 9, T from 2 to 24, all different from each other."""
    cases = []
    for _ in range(count):
        N = rng.randint(1, 6)
        G = rng.choice([g for g in range(2, 10) if g != N])
        T = rng.choice([t for t in range(2, 25) if t not in (N, G, N * G)])
        cases.append({"N": N, "G": G, "T": T, "holes": rng.random() < 0.5})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


def sizes(case) -> dict:
    return {"N": case["N"], "G": case["G"], "B": case["N"] * case["G"], "T": case["T"]}


# --------------------------------------------------------------------------- inputs


def spread(gen, G: int) -> torch.Tensor:
    """G float64 values of spread about 1, never bunched: evenly spaced over [-1.5, 1.5],
    shuffled, plus N(0, 0.3^2) noise (a group of nearly equal rewards would make the
    advantages as ill-conditioned as the eps allows)."""
    even = torch.linspace(-1.5, 1.5, G, dtype=torch.float64)[torch.randperm(G, generator=gen)]
    return even + randn(gen, G, dtype=torch.float64, std=0.3)


def make_rewards(gen, case, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """[N * G], grouped consecutively, the kind of group g being REWARD_KINDS[g % 4]."""
    groups = []
    for g in range(case["N"]):
        kind = REWARD_KINDS[g % len(REWARD_KINDS)]
        if kind == "small":  # spread 0.01 near 0: eps = 1e-4 is 1% of the std
            offset = 0.03 * (2 * float(torch.rand(1, generator=gen, dtype=torch.float64)) - 1)
            groups.append(offset + 0.01 * spread(gen, case["G"]))
        elif kind == "constant":  # every completion scored alike: std 0
            value = CONSTANTS[int(torch.randint(len(CONSTANTS), (1,), generator=gen))]
            groups.append(torch.full((case["G"],), value, dtype=torch.float64))
        elif kind == "binary":  # a correctness reward: 1 right, 0 wrong
            groups.append((torch.rand(case["G"], generator=gen, dtype=torch.float64) < 0.5).double())
        else:  # "large": spread 10 around an offset within +-30
            offset = 30 * (2 * float(torch.rand(1, generator=gen, dtype=torch.float64)) - 1)
            groups.append(offset + 10 * spread(gen, case["G"]))
    return torch.cat(groups).to(dtype=dtype, device=device)


def make_mask(gen, case, empty: int = 0) -> torch.Tensor:
    """Boolean [B, T], right-padded, lengths 1..T (each row its own where T allows), with
    `holes` some zeros inside the completions (never at a row's first token), and `empty`
    rows all False."""
    B, T = case["N"] * case["G"], case["T"]
    order = torch.randperm(T, generator=gen)
    lengths = torch.tensor([int(order[b % T]) + 1 for b in range(B)])
    for row in torch.randperm(B, generator=gen)[:empty]:
        lengths[row] = 0
    mask = torch.arange(T) < lengths[:, None]
    if case["holes"]:
        hole = torch.rand(B, T, generator=gen) < 0.25
        hole[:, 0] = False  # a hole never empties a row: empty rows are a convention
        mask &= ~hole
    return mask


def make_args(gen, case, dtype=torch.float32, device="cpu", *, mask="float", clip_eps=None, beta=None, empty=0) -> dict:
    """The arguments of one grpo_loss call; clip_eps and beta only when given."""
    B, T = case["N"] * case["G"], case["T"]
    bound = CLIP_EPS if clip_eps is None else clip_eps
    logps = -(0.05 + 3 * torch.rand(B, T, generator=gen, dtype=torch.float64))
    step = 2 * torch.rand(B, T, generator=gen, dtype=torch.float64) - 1  # logps - old_logps
    step = step.masked_fill(torch.rand(B, T, generator=gen) < 0.2, 0.0)
    for edge_at in (math.log(1 - bound), math.log(1 + bound)):  # the gradient jumps there
        near = (step - edge_at).abs() < BOUNDARY_GAP
        step = torch.where(near, edge_at + BOUNDARY_GAP * torch.where(step >= edge_at, 1.0, -1.0), step)
    ref_logps = logps + randn(gen, B, T, dtype=torch.float64, std=0.5)
    advantages = randn(gen, B, dtype=torch.float64)
    advantages[0] = advantages[0].abs()
    advantages[1] = -advantages[1].abs()
    keep = make_mask(gen, case, empty)
    cast = {"dtype": dtype, "device": device}
    args = {
        "logps": logps.to(**cast),
        "old_logps": (logps - step).to(**cast),
        "ref_logps": ref_logps.to(**cast),
        "advantages": advantages.to(**cast),
        "completion_mask": keep.to(device) if mask == "bool" else keep.to(**cast),
    }
    return args | ({} if clip_eps is None else {"clip_eps": clip_eps}) | ({} if beta is None else {"beta": beta})


# --------------------------------------------------------------------------- references


def reference_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """(reward - its group's mean) / (its group's unbiased std + eps), in float64."""
    grouped = rewards.double().reshape(-1, group_size)
    std = torch.std(grouped, dim=1, keepdim=True)  # unbiased, as the kata asks
    return ((grouped - grouped.mean(dim=1, keepdim=True)) / (std + eps)).reshape(-1).to(rewards.dtype)


def reference_loss_float64(logps, old_logps, ref_logps, advantages, completion_mask, clip_eps=CLIP_EPS, beta=BETA):
    """The GRPO loss in float64 (logps may require grad): the clipped objective, the k3 KL
    estimator (left out when beta == 0), each row's masked mean (count clamped at 1), the
    mean over rows."""
    ratio = torch.exp(logps.double() - old_logps.double())
    A = advantages.double()[:, None]
    token = -torch.min(ratio * A, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)
    if beta != 0:
        log_ratio = ref_logps.double() - logps.double()
        token = token + beta * (torch.exp(log_ratio) - log_ratio - 1)
    mask = completion_mask.double()
    return ((token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


def reference_loss(args: dict) -> torch.Tensor:
    return reference_loss_float64(**args).to(args["logps"].dtype)


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call): the advantages of 16 prompts x 8 completions, then the
    loss over their 128 completions of 1024 tokens, float32, right-padded masks. PyTorch has
    no GRPO: the reference is the same formula written here, vectorised, in float32."""
    gen = torch.Generator().manual_seed(0)
    case = {"N": 16, "G": 8, "T": 1024, "holes": False}
    rewards = make_rewards(gen, case, device=device)
    args = make_args(gen, case, device=device, empty=1)
    G = case["G"]

    def reference():
        grouped = rewards.view(-1, G)
        advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + EPS)).view(-1)
        ratio = torch.exp(args["logps"] - args["old_logps"])
        A = advantages[:, None]
        token = -torch.min(ratio * A, torch.clamp(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * A)
        log_ratio = args["ref_logps"] - args["logps"]
        token = token + BETA * (torch.exp(log_ratio) - log_ratio - 1)
        mask = args["completion_mask"]
        return ((token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()

    def mine():
        advantages = kata.group_advantages(rewards, G)
        return kata.grpo_loss(args["logps"], args["old_logps"], args["ref_logps"], advantages, args["completion_mask"])

    return mine, reference


SPEC = KataSpec(
    kata="grpo",
    symbol="grpo_loss",
    reference="the GRPO formulas in float64 (torch.std, torch.clamp, torch.min), as TRL's GRPOTrainer computes them",
    forbidden=NONE,  # PyTorch has no GRPO
    also={"group_advantages": NONE},
    tolerances=LOSS_TOLERANCES,
    tolerance_note=(
        "the loss's (a 0-d mean); advantages rtol 8 eps and atol 8 eps * max|reward| / (std + eps) of the "
        "worst-conditioned group (r - mean cancels); the gradient of logps rtol and atol per unit of its "
        "largest element, float64 2e-15, float32 1e-6: the solution and variants measured at most 0.17 "
        "(loss), 0.13 (advantages) and 0.18 (gradient) of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)
LOSS_ARGS = ("logps", "old_logps", "ref_logps", "advantages", "completion_mask")
GRPO = FunctionKata(
    SPEC,
    outputs={"grpo_loss": "loss", "group_advantages": "advantages"},
    parameters={"grpo_loss": (*LOSS_ARGS, "clip_eps", "beta"), "group_advantages": ("rewards", "group_size", "eps")},
)


# --------------------------------------------------------------------------- calls and checks


def split(args: dict) -> tuple[tuple, dict]:
    """grpo_loss's call: the five tensors positionally, clip_eps and beta by keyword when given."""
    return tuple(args[name] for name in LOSS_ARGS), {k: args[k] for k in ("clip_eps", "beta") if k in args}


def check_loss(kata, case, args: dict, *, float64_throughout=False) -> None:
    want = reference_loss(args)
    positional, keywords = split(args)
    with GRPO.judging(kata, *positional, sizes=sizes(case), **keywords) as call:
        SPEC.assert_close(call["loss"], want, call=call.text, what="loss", float64_throughout=float64_throughout)


def check_advantages(kata, case, rewards, eps=None, *, float64_throughout=False) -> None:
    eps_ = EPS if eps is None else eps
    want = reference_advantages(rewards, case["G"], eps_)
    tolerance = advantage_tolerance(rewards, case["G"], eps_, float64_throughout=float64_throughout)
    kwargs = {} if eps is None else {"eps": eps}
    with GRPO.judging(kata, rewards, case["G"], symbol="group_advantages", sizes=sizes(case), **kwargs) as call:
        assert_close(call["advantages"], want, call=call.text, what="advantages", tolerance=tolerance)


def check_gradient(kata, case, args: dict, *, float64_throughout=False) -> None:
    """Autograd through the kata against autograd through the float64 reference, for logps."""
    twin = args["logps"].detach().double().requires_grad_()
    reference_loss_float64(**(args | {"logps": twin})).backward()
    want = twin.grad.to(args["logps"].dtype)
    positional, keywords = split(args)
    upstream = torch.ones((), dtype=args["logps"].dtype)
    text = GRPO.text("grpo_loss", positional, keywords) + ".backward"
    what = "the gradient of `logps`"
    tolerance = gradient_tolerance(want, float64_throughout=float64_throughout)
    with GRPO.judging_gradients(kata, *positional, wrt=(0,), upstream=upstream, sizes=sizes(case), **keywords) as got:
        assert_close(got[what], want, call=text, what=what, tolerance=tolerance)


@scenario
def called_with_logps_requiring_grad(kata, args: tuple, kwargs: dict) -> dict:
    """grpo_loss(*args, **kwargs) with logps (args[0]) a leaf that requires grad: the
    arguments as the call left them (detached, to travel as data)."""
    args = list(args)
    args[0] = args[0].requires_grad_()
    kata.grpo_loss(*args, **kwargs)
    return {"args": [a.detach() if isinstance(a, torch.Tensor) else a for a in args]}


# --------------------------------------------------------------------------- group_advantages


@core(zh="group_advantages 对每组连续的奖励做归一化")
@dtypes(*FULL)
def test_group_advantages_normalise_each_group_of_consecutive_rewards(kata, rng, gen, dtype, device):
    """(reward - its group's mean) / (its group's unbiased std + eps), groups of G consecutive
    rewards; a group of equal rewards gives 0; the default eps (1e-4) and explicit ones."""
    for case in CASES.cases(rng):
        with case.judged():
            rewards = make_rewards(gen, case, dtype, device)
            check_advantages(kata, case, rewards)
            check_advantages(kata, case, rewards, eps=rng.choice((1e-6, 1e-3, 0.01)))


@convention(
    "raise ValueError when group_size < 2 (a group of one has no unbiased std) and ...",
    zh="每组少于 2 个时 group_advantages 抛出 ValueError",
)
def test_group_advantages_of_fewer_than_2_per_group_raise_value_error(kata, rng, gen):
    case = CASES.random(rng)[0]
    for group_size in (1, 0):
        rewards = make_rewards(gen, case)
        reason = pick(
            "a group needs at least 2 completions for an unbiased std", "一组至少要有 2 个补全才能算无偏标准差"
        )
        GRPO.assert_raises(kata, ValueError, rewards, group_size, reason=reason, symbol="group_advantages")


@convention(
    "... and when len(rewards) is not a multiple of group_size.",
    zh="rewards 不能分成整组时 group_advantages 抛出 ValueError",
)
def test_group_advantages_raise_value_error_when_rewards_do_not_split_into_whole_groups(kata, rng, gen):
    case = CASES.random(rng)[0] | {"G": 3}
    for extra in (1, 2):
        rewards = torch.cat([make_rewards(gen, case), randn(gen, extra)])
        reason = pick(
            f"{rewards.numel()} rewards are not a whole number of groups of 3",
            f"{rewards.numel()} 个奖励不能恰好分成每组 3 个的整数组",
        )
        GRPO.assert_raises(kata, ValueError, rewards, 3, reason=reason, symbol="group_advantages")


# --------------------------------------------------------------------------- grpo_loss


@core(zh="grpo_loss 与公式一致")
@dtypes(*FULL)
def test_grpo_loss_matches_the_formula(kata, rng, gen, dtype, device):
    """Default clip_eps (0.2) and beta (0.04); the mask as 0.0/1.0 floats, then as bools."""
    for case in CASES.cases(rng):
        with case.judged():
            for mask in ("float", "bool"):
                check_loss(kata, case, make_args(gen, case, dtype, device, mask=mask))


@core(zh="梯度像经过公式的 autograd 一样回传到 logps")
@dtypes(*FULL)
def test_gradients_flow_back_to_logps_like_autograd_through_the_formula(kata, rng, gen, dtype):
    """Outside the clip range the clipped side carries no gradient; inside it both sides
    agree. Default settings, then beta = 0 without a reference, then random ones."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            mask = ("float", "bool")[index % 2]
            check_gradient(kata, case, make_args(gen, case, dtype, mask=mask))
            check_gradient(kata, case, make_args(gen, case, dtype, mask=mask, beta=0.0) | {"ref_logps": None})
            clip_eps, beta = rng.choice((0.1, 0.3)), rng.choice((0.01, 0.2))
            check_gradient(kata, case, make_args(gen, case, dtype, mask=mask, clip_eps=clip_eps, beta=beta))


@core(zh="非默认值的 clip_eps 和 beta")
@dtypes(*FULL)
def test_clip_eps_and_beta_other_than_the_defaults(kata, rng, gen, dtype, device):
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            clip_eps, beta = rng.choice((0.1, 0.28, 0.5)), rng.choice((0.01, 0.1, 0.5))
            mask = ("bool", "float")[index % 2]
            check_loss(kata, case, make_args(gen, case, dtype, device, mask=mask, clip_eps=clip_eps, beta=beta))


@core(zh="beta 为 0 时去掉 KL 项，不需要参考模型")
@dtypes(*FULL)
def test_beta_0_leaves_the_kl_term_out_without_a_reference_model(kata, rng, gen, dtype, device):
    """beta = 0 with ref_logps None (no reference model)."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            args = make_args(gen, case, dtype, device, mask=("float", "bool")[index % 2], beta=0.0)
            check_loss(kata, case, args | {"ref_logps": None})


@convention(
    "with beta == 0, ref_logps is not read at all: it may hold anything, -inf included",
    zh="beta 为 0 时从不读取 ref_logps，即使其中有 -inf",
)
@dtypes(*FULL)
def test_beta_0_never_reads_ref_logps_even_when_it_holds_minus_inf(kata, rng, gen, dtype, device):
    """ref_logps holding -inf: its KL term would be inf, and 0 * inf is NaN."""
    for case in CASES.cases(rng):
        with case.judged():
            args = make_args(gen, case, dtype, device, beta=0.0)
            blocked = torch.rand(args["ref_logps"].shape, generator=gen) < 0.3
            check_loss(kata, case, args | {"ref_logps": args["ref_logps"].masked_fill(blocked.to(device), -math.inf)})


@convention(
    "an empty row (a completion whose mask is all 0) gives 0, never 0 / 0, and still counts in the mean",
    zh="空行得 0，并计入对所有补全取的平均",
)
@dtypes(*FULL)
def test_an_empty_row_gives_0_and_counts_in_the_mean_over_completions(kata, rng, gen, dtype, device):
    """One or two rows of every case with an empty mask: values (float and bool masks, the
    defaults and other settings) and the gradient of logps."""
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            empty = rng.choice((1, 2))
            for mask in ("float", "bool"):
                check_loss(kata, case, make_args(gen, case, dtype, device, mask=mask, empty=empty))
            options = {"clip_eps": rng.choice((0.1, 0.3)), "beta": rng.choice((0.0, 0.01, 0.2))}
            check_loss(kata, case, make_args(gen, case, dtype, device, empty=empty, **options))
            check_gradient(kata, case, make_args(gen, case, dtype, mask=("float", "bool")[index % 2], empty=empty))


# --------------------------------------------------------------------------- both


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The advantages, the loss and its gradient, each held to float64's own tolerance."""
    for index, case in enumerate(CASES.cases(rng, 2)):
        with case.judged():
            check_advantages(kata, case, make_rewards(gen, case, torch.float64), float64_throughout=True)
            args = make_args(gen, case, torch.float64, mask=("float", "bool")[index % 2])
            check_loss(kata, case, args, float64_throughout=True)
            check_gradient(kata, case, args, float64_throughout=True)


@convention("the advantages are on rewards' device.", zh="优势值跟随 rewards 所在的设备")
def test_the_advantages_follow_the_device_of_the_rewards(kata, other_device):
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed

    def make(device):
        return (make_rewards(torch.Generator().manual_seed(0), case, device=device), case["G"]), {}

    def expected(device) -> dict:
        return {"advantages": reference_advantages(make(device)[0][0], case["G"])}

    def compare(got, want, *, call, what):
        assert_close(got, want, call=call, what=what, tolerance=advantage_tolerance(want, case["G"], EPS))

    GRPO.on_device(
        kata, other_device, make=make, expected=expected, compare=compare, symbol="group_advantages", sizes=sizes(case)
    )


@convention("the loss is on logps' device.", zh="损失跟随输入所在的设备")
def test_the_loss_follows_the_device_of_the_inputs(kata, other_device):
    case = CASES.edges[0]  # fixed: a verdict on the meta stand-in must not depend on the seed
    for mask in ("float", "bool"):

        def make(device, mask=mask):
            return split(make_args(torch.Generator().manual_seed(0), case, device=device, mask=mask))

        def expected(device, mask=mask) -> dict:
            return {"loss": reference_loss(make_args(torch.Generator().manual_seed(0), case, device=device, mask=mask))}

        GRPO.on_device(kata, other_device, make=make, expected=expected, compare=SPEC.assert_close, sizes=sizes(case))


@convention("the inputs are never modified (logps requiring grad included).", zh="grpo_loss 不修改输入")
def test_grpo_loss_does_not_modify_its_inputs(kata, gen):
    """bool and float masks, beta = 0 without a reference; then a logps that requires grad,
    where a kata may convert or fill in place."""
    case = CASES.edges[0]
    for mask in ("bool", "float"):
        positional, keywords = split(make_args(gen, case, mask=mask))
        GRPO.judging_inputs(kata, *positional, sizes=sizes(case), **keywords)
    positional, keywords = split(make_args(gen, case, beta=0.0) | {"ref_logps": None})
    GRPO.judging_inputs(kata, *positional, sizes=sizes(case), **keywords)
    positional, keywords = split(make_args(gen, case, mask="bool"))
    text = GRPO.text("grpo_loss", positional, keywords) + pick(
        " with a logps that requires grad", "（传入的 logps 需要梯度）"
    )

    def check(implementation) -> dict:
        came = called_with_logps_requiring_grad(implementation, positional, keywords)["args"]
        assert_inputs_unchanged(text, dict(zip(LOSS_ARGS, positional)), dict(zip(LOSS_ARGS, came)))
        return {}

    with SPEC.diagnosing(check, sizes(case)):
        check(kata)


@convention("rewards is never modified.", zh="group_advantages 不修改 rewards")
def test_group_advantages_do_not_modify_the_rewards(kata, rng, gen):
    for case in (CASES.edges[0], CASES.random(rng)[0]):
        for dtype in FULL:
            rewards = make_rewards(gen, case, dtype)
            GRPO.judging_inputs(kata, rewards, case["G"], symbol="group_advantages", sizes=sizes(case))

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
and some random draws), every row of its own length where T allows, and some cases have an
empty row; padded positions hold ordinary finite values. Values are judged in float64 and
float32 (the gradient of logps too), with float and bool masks.
"""

import math

import torch

from judge.forbidden import NONE, ForbiddenCallError
from judge.testing.checks import (
    assert_close,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

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
# tolerances.
LOSS_TOLERANCES = {
    torch.float64: {"rtol": 2e-15, "atol": 2e-15},
    torch.float32: {"rtol": 1e-6, "atol": 1e-6},
}
ADVANTAGE_ROUNDING = 8


def advantage_tolerance(rewards: torch.Tensor, group_size: int, eps: float) -> dict:
    """(reward - mean) cancels: it is off by about eps(dtype) * |reward|, which the division
    by (std + eps) magnifies. atol = ADVANTAGE_ROUNDING * eps(dtype) times the worst
    conditioning max|reward| / (std + eps) of a group (at least 1), over the groups whose
    rewards are not all equal (equal rewards, exact in float32, give exactly 0); rtol the
    same number of eps (the result's own rounding)."""
    grouped = rewards.detach().double().cpu().reshape(-1, group_size)
    std = grouped.std(dim=1)
    conditioning = grouped.abs().amax(dim=1) / (std + eps)
    varied = conditioning[std > 0]
    scale = max(1.0, float(varied.max())) if varied.numel() else 1.0
    rounding = ADVANTAGE_ROUNDING * torch.finfo(rewards.dtype).eps
    return {"rtol": rounding, "atol": rounding * scale}


GRADIENT_RELATIVE = {torch.float64: 2e-15, torch.float32: 1e-6}  # atol per unit of the largest |gradient|


def gradient_tolerance(expected: torch.Tensor) -> dict:
    scale = float(expected.abs().max()) or 1.0
    relative = GRADIENT_RELATIVE[expected.dtype]
    return {"rtol": relative, "atol": relative * scale}


# --------------------------------------------------------------------------- the case table
#
# Sizes: N prompts, G completions per prompt (B = N * G rows), T tokens; empty: how many rows
# have an empty mask; holes: whether some rows' masks have zeros inside their completion.

EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    # groups of 2 (the smallest), three reward kinds, lengths 1..7 and an empty row
    edge("groups of 2, rows of different lengths, one row empty", N=3, G=2, T=7, empty=1, holes=False),
    # B = T: an advantage applied per token position instead of per row still broadcasts
    edge("B = T = 6: each advantage goes with its row, not a token position", N=2, G=3, T=6, empty=0, holes=False),
    edge("one prompt (N = 1), a group of 8", N=1, G=8, T=5, empty=1, holes=False),
    edge("one token per completion (T = 1)", N=3, G=4, T=1, empty=1, holes=False),
    edge("odd sizes, every reward kind, holes in the masks", N=5, G=5, T=9, empty=0, holes=True),
)


def hidden_sizes(rng, count: int) -> list[dict]:
    """N from 1 to 6, G from 2 to 9, T from 2 to 24, all different from each other."""
    cases = []
    for _ in range(count):
        N = rng.randint(1, 6)
        G = rng.choice([g for g in range(2, 10) if g != N])
        T = rng.choice([t for t in range(2, 25) if t not in (N, G, N * G)])
        cases.append({"N": N, "G": G, "T": T, "empty": rng.choice((0, 1)), "holes": rng.random() < 0.5})
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


def make_mask(gen, case) -> torch.Tensor:
    """Boolean [B, T], right-padded, lengths 1..T (each row its own where T allows), `empty`
    rows all False, and with `holes` some zeros inside the completions."""
    B, T = case["N"] * case["G"], case["T"]
    order = torch.randperm(T, generator=gen)
    lengths = torch.tensor([int(order[b % T]) + 1 for b in range(B)])
    for row in torch.randperm(B, generator=gen)[: case["empty"]]:
        lengths[row] = 0
    mask = torch.arange(T) < lengths[:, None]
    if case["holes"]:
        mask &= torch.rand(B, T, generator=gen) >= 0.25
    return mask


def make_args(gen, case, dtype=torch.float32, device="cpu", *, mask="float", clip_eps=None, beta=None) -> dict:
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
    keep = make_mask(gen, case)
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


# --------------------------------------------------------------------------- calls

LOSS_ARGS = ("logps", "old_logps", "ref_logps", "advantages", "completion_mask")


def clones(args: dict) -> dict:
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def call_loss(kata, args: dict):
    """(call, result) of grpo_loss: the five tensors positionally, clip_eps and beta by
    keyword when the test gives them; every input checked unchanged afterwards."""
    positional = [args[name] for name in LOSS_ARGS]
    keywords = {k: args[k] for k in ("clip_eps", "beta") if k in args}
    call = call_repr("grpo_loss", *positional, **keywords)
    tensors = {k: v for k, v in args.items() if isinstance(v, torch.Tensor)}
    return call, call_and_check_inputs(lambda: kata.grpo_loss(*positional, **keywords), call, **tensors)


def call_advantages(kata, rewards, group_size, eps=None):
    kwargs = {} if eps is None else {"eps": eps}
    call = call_repr("group_advantages", rewards, group_size, **kwargs)
    return call, call_and_check_inputs(
        lambda: kata.group_advantages(rewards, group_size, **kwargs), call, rewards=rewards
    )


def check_loss(kata, case, args: dict) -> None:
    want = reference_loss(args)  # first: the kata may break its inputs
    originals = clones(args)

    def replay(implementation) -> dict:
        return {"loss": call_loss(implementation, clones(originals))[1]}

    with SPEC.diagnosing(replay, sizes(case)):
        call, got = call_loss(kata, args)
        SPEC.assert_close(got, want, call=call, what="loss")


def check_advantages(kata, case, rewards, eps=None) -> None:
    want = reference_advantages(rewards, case["G"], EPS if eps is None else eps)  # first: the kata may break its inputs
    tolerance = advantage_tolerance(rewards, case["G"], EPS if eps is None else eps)
    original = rewards.clone()

    def replay(implementation) -> dict:
        return {"advantages": call_advantages(implementation, original.clone(), case["G"], eps)[1]}

    with SPEC.diagnosing(replay, sizes(case)):
        call, got = call_advantages(kata, rewards, case["G"], eps)
        assert_close(got, want, call=call, what="advantages", tolerance=tolerance)


def check_gradient(kata, case, args: dict) -> None:
    """Autograd through the kata against autograd through the float64 reference, for logps."""
    twin = args["logps"].detach().double().requires_grad_()
    reference_loss_float64(**(args | {"logps": twin})).backward()
    want = twin.grad.to(args["logps"].dtype)
    originals = clones(args)
    call = call_repr("grpo_loss", *[args[name] for name in LOSS_ARGS]) + ".backward"
    what = "the gradient of `logps`"

    def gradient(implementation) -> dict:
        mine = originals["logps"].clone().requires_grad_()
        _, loss = call_loss(implementation, clones(originals) | {"logps": mine})
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            raise AssertionError(f"{call}: the loss does not require grad; autograd lost track of logps")
        loss.backward()
        if mine.grad is None:
            raise AssertionError(f"{call}: no gradient reached `logps`")
        return {what: mine.grad}

    with SPEC.diagnosing(gradient, sizes(case)):
        got = gradient(kata)[what]
        assert_close(got, want, call=call, what=what, tolerance=gradient_tolerance(want))


def expect_value_error(kata, call: str, build, reason: str, case) -> None:
    """build(implementation) must raise ValueError; the failure is diagnosed like any other."""

    def check(implementation) -> dict:
        try:
            result = build(implementation)
        except ValueError:
            return {}
        except (NotImplementedError, ForbiddenCallError):  # the stub, a refusal: as they are
            raise
        except Exception as error:  # noqa: BLE001 - the message names what was raised instead
            raise AssertionError(
                f"{call} raised {type(error).__name__}: {error}; expected ValueError ({reason})"
            ) from None
        raise AssertionError(f"{call} returned {describe(result)}; expected ValueError ({reason})")

    with SPEC.diagnosing(check, sizes(case)):
        check(kata)


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call): the advantages of 16 prompts x 8 completions, then the
    loss over their 128 completions of 1024 tokens, float32, right-padded masks. PyTorch has
    no GRPO: the reference is the same formula written here, vectorised, in float32."""
    gen = torch.Generator().manual_seed(0)
    case = {"N": 16, "G": 8, "T": 1024, "empty": 1, "holes": False}
    rewards = make_rewards(gen, case, device=device)
    args = make_args(gen, case, device=device)
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


# --------------------------------------------------------------------------- group_advantages


@dtypes(*FULL)
def test_group_advantages_normalise_each_group_of_consecutive_rewards(kata, rng, gen, dtype, device):
    """(reward - its group's mean) / (its group's unbiased std + eps), groups of G consecutive
    rewards; a group of equal rewards gives 0; the default eps (1e-4) and explicit ones."""
    for case in CASES.cases(rng):
        with case.judged():
            rewards = make_rewards(gen, case, dtype, device)
            check_advantages(kata, case, rewards)
            check_advantages(kata, case, rewards, eps=rng.choice((1e-6, 1e-3, 0.01)))


def test_group_advantages_of_fewer_than_2_per_group_raise_value_error(kata, rng, gen):
    case = CASES.random(rng)[0]
    for group_size in (1, 0):
        rewards = make_rewards(gen, case)
        call = call_repr("group_advantages", rewards, group_size)
        expect_value_error(
            kata,
            call,
            lambda implementation, g=group_size, r=rewards: implementation.group_advantages(r.clone(), g),
            "a group needs at least 2 completions for an unbiased std",
            case,
        )


def test_group_advantages_raise_value_error_when_rewards_do_not_split_into_whole_groups(kata, rng, gen):
    case = CASES.random(rng)[0] | {"G": 3}
    for extra in (1, 2):
        rewards = torch.cat([make_rewards(gen, case), randn(gen, extra)])
        call = call_repr("group_advantages", rewards, 3)
        expect_value_error(
            kata,
            call,
            lambda implementation, r=rewards: implementation.group_advantages(r.clone(), 3),
            f"{rewards.numel()} rewards are not a whole number of groups of 3",
            case,
        )


# --------------------------------------------------------------------------- grpo_loss


@dtypes(*FULL)
def test_grpo_loss_matches_the_formula(kata, rng, gen, dtype, device):
    """Default clip_eps (0.2) and beta (0.04); the mask as 0.0/1.0 floats, then as bools."""
    for case in CASES.cases(rng):
        with case.judged():
            for mask in ("float", "bool"):
                check_loss(kata, case, make_args(gen, case, dtype, device, mask=mask))


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


@dtypes(*FULL)
def test_clip_eps_and_beta_other_than_the_defaults(kata, rng, gen, dtype, device):
    for index, case in enumerate(CASES.cases(rng)):
        with case.judged():
            clip_eps, beta = rng.choice((0.1, 0.28, 0.5)), rng.choice((0.01, 0.1, 0.5))
            mask = ("bool", "float")[index % 2]
            check_loss(kata, case, make_args(gen, case, dtype, device, mask=mask, clip_eps=clip_eps, beta=beta))


@dtypes(*FULL)
def test_beta_0_leaves_the_kl_term_out_without_reading_ref_logps(kata, rng, gen, dtype, device):
    """beta = 0: ref_logps None (no reference model), then ref_logps holding -inf (its KL
    term would be inf, and 0 * inf is NaN)."""
    for case in CASES.cases(rng):
        with case.judged():
            args = make_args(gen, case, dtype, device, beta=0.0)
            check_loss(kata, case, args | {"ref_logps": None})
            blocked = torch.rand(args["ref_logps"].shape, generator=gen) < 0.3
            check_loss(kata, case, args | {"ref_logps": args["ref_logps"].masked_fill(blocked.to(device), -math.inf)})


# --------------------------------------------------------------------------- both


def advantages_replay(rewards, group_size: int):
    """The same group_advantages call with another implementation (for the diagnosis)."""
    return lambda implementation: {"advantages": call_advantages(implementation, rewards.clone(), group_size)[1]}


def loss_replay(args: dict):
    """The same grpo_loss call with another implementation (for the diagnosis)."""
    return lambda implementation: {"loss": call_loss(implementation, clones(args))[1]}


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    for case in (CASES.edges[0], CASES.random(rng)[0]):
        with case.judged():
            rewards = make_rewards(gen, case, device=other_device)
            for mask in ("float", "bool"):
                args = make_args(gen, case, device=other_device, mask=mask)
                if other_device != "meta":
                    check_advantages(kata, case, rewards)
                    check_loss(kata, case, args)
                    continue
                # meta: a shape and a device, no values
                want_advantages, want_loss = torch.empty(rewards.shape, device="meta"), torch.empty((), device="meta")
                with SPEC.diagnosing(advantages_replay(rewards, case["G"]), sizes(case)):
                    call, got = call_on_device(lambda r=rewards, g=case["G"]: call_advantages(kata, r, g), other_device)
                    check_tensor_kind(got, want_advantages, call=call, what="advantages")
                with SPEC.diagnosing(loss_replay(args), sizes(case)):
                    call, got = call_on_device(lambda a=args: call_loss(kata, a), other_device)
                    check_tensor_kind(got, want_loss, call=call, what="loss")


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call is checked (see call_loss and call_advantages); here with bool and float
    masks and a logps that requires grad, where a kata may convert or fill in place."""
    case = CASES.edges[0]
    for mask in ("bool", "float"):
        args = make_args(gen, case, mask=mask)
        args["logps"].requires_grad_()
        with SPEC.diagnosing(loss_replay(clones(args)), sizes(case)):
            call_loss(kata, args)
    rewards = make_rewards(gen, case)
    with SPEC.diagnosing(advantages_replay(rewards.clone(), case["G"]), sizes(case)):
        call_advantages(kata, rewards, case["G"])

"""ppo: what its tests share: the SPEC, the float64 references, the cases, the checks.

gae is judged against a plain Python loop in float64, ppo_clip_loss against its formula in
float64 (values, and gradients by autograd).

PyTorch has no PPO, so both references are the kata's formulas written here in float64:
GAE as a Python loop over rows and steps on Python floats (backwards over t), the loss as
the formula of the kata text with autograd, on the inputs as the kata gets them (rounded
to the dtype under test), the results rounded to that dtype.

Rollouts: rewards N(0, 1), values and last_value N(0, 2^2), episodes that end anywhere
(each step done with probability 1/4, as bool or 0/1 floats), row 0 always done at t = 0
and at t = T - 1, the last row never done at t = T - 1 (so last_value matters). GAE must
record no graph: a convention test gives it inputs that require grad.

Batches for the loss: log-ratios N(0, 0.35^2) (about half the ratios outside [0.8, 1.2],
on both sides), advantages N(0, 1), values N(0, 0.5^2) away from old_values (most outside
the value clip range, on both sides), returns N(0, 1) away from old_values; the first
counted tokens are set to each quadrant (ratio above / below the range, advantage + / -;
value above / below the range, clipped term larger / smaller). Masks are completion-style
spans (a prompt and padding masked), one row all padding in some cases, bool or 0/1
floats. Where float32 could take another branch than float64 (a ratio or a value within
1e-3 of a clip boundary, the two squared errors within 1e-3 of a tie), the entry is moved
inside the range (logps = old_logps, values = old_values): no tolerance can absorb a
branch taken the other way.

Every call runs in the kata process through FunctionKata (a scenario, on copies of the
arguments), gradients through FunctionKata.judging_gradients; what GAE does with inputs
that require grad is observed there by the scenario `gae_with_inputs_requiring_grad`.
"""

import math

import torch

from judge.forbidden import NONE
from judge.testing.checks import assert_close, check_tensor_kind
from judge.testing.functions import FunctionKata, computation_eps, pair, tuple_of
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases show first in it
HALF = (torch.float16, torch.bfloat16)
P_DONE = 0.25  # probability that an episode ends after a given step
MARGIN = 1e-3  # how far every entry stays from a clip boundary or a tie of the value max

# --------------------------------------------------------------------------- tolerances
#
# Every result is a sum of terms that may cancel, so its error follows the size of the
# terms, not of the result: atol = ROUNDING * eps(computation dtype) * scale, where eps is
# float64's for float64 and float32's for every other dtype (half is computed in float32),
# and scale is, per call (see gae_reference and loss_scales):
#   gae: the largest sum of |r_k| + gamma |V_k+1| + |V_k| discounted by (gamma lam)^(k-t)
#        and cut at episode ends (the same recursion on magnitudes), plus |V_t|;
#   policy_loss: the mask-mean of (ratio + 1) |A|; value_loss: 1/2 the mask-mean of
#        (|V| + |V_old| + |R|)^2 (a squared difference rounds at its operands' scale);
#        total: policy's + value_coef * value's;
#   gradients: (max ratio |A| + max(|V| + |V_old| + |R|)) * max(1, value_coef) / sum(mask),
#        the largest term of any gradient element.
# Half-precision results add rtol RESULT_ULPS ulps of their own dtype (the final rounding),
# and for gae one ulp of the largest advantage (returns may be formed as A + V in the half
# dtype, after A is rounded).
# Measured over 100 seeds x every case of the tests (the 6 edge cases and 3 random draws,
# dones bool and float, masks bool and float, default and random clip settings), on the
# solution and both variants (a discount matrix without a loop, with boolean-indexed means;
# CleanRL's negated-max form with torch.where masks, half precision in float64), the worst
# error as a fraction of the allowed:
#   gae:        float64 0.15, float32 0.18, float16 0.45, bfloat16 0.44
#   loss:       float64 0.14, float32 0.12, float16 0.37, bfloat16 0 (one rounding)
#   gradients:  float64 0 (the same operations), float32 0.12
# float32's worst is the final rounding of a result whose terms do not cancel (one ulp).
# The slips this must reject: a float64 input computed through float32 measured 4.8e7 (gae),
# 4.6e7 (loss) and 3.5e7 (gradients) times the float64 tolerance; GAE computed in the half
# dtype itself 1.7x (float16) and 2.3x (bfloat16), the loss 39x and 241x; every slip of
# tests/mutants/ppo.toml is off by 1e-2 to 1. The core tier judges float64 results with
# float32's eps (see FLOAT64_RULE); the float64 rule's test holds them to float64's.
ROUNDING = 4
RESULT_ULPS = 2


def tolerance(dtype: torch.dtype, scale: float = 1.0, half_atol: float = 0.0, *, float64_throughout=True) -> dict:
    """(rtol, atol) for a result of this dtype whose terms are about `scale` in size; a
    float64 result gets float32's eps unless float64_throughout (the core tier's, see
    FLOAT64_RULE; True here for the SPEC's table)."""
    atol = ROUNDING * computation_eps(core_dtype(dtype, float64_throughout)) * scale
    if dtype in FULL:
        return {"rtol": 0.0, "atol": atol}
    return {"rtol": RESULT_ULPS * torch.finfo(dtype).eps, "atol": atol + half_atol}


# --------------------------------------------------------------------------- the case table
#
# Sizes: B rollouts of T steps; gamma and lam passed to gae when the case names them (the
# defaults otherwise); padding_row: one row of the loss's mask is all padding.

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("episodes end mid-sequence, at t = 0 and at t = T - 1; a row all padding",
         "回合在序列中途、t = 0 和 t = T - 1 处结束；有一行全是填充",
         B=4, T=7, gamma=0.9, lam=0.8, padding_row=True),
    # a [T, B] layout (time along dim 0, as CleanRL stores rollouts) runs here and is wrong
    edge("B = T: time is dim 1, not dim 0", "B = T：时间是第 1 维，不是第 0 维",
         B=5, T=5, gamma=0.95, lam=0.9, padding_row=False),
    edge("one step: T = 1", "只有一步：T = 1",
         B=3, T=1, gamma=0.97, lam=0.9, padding_row=True),
    edge("one row: B = 1, the default gamma and lam", "只有一行：B = 1，gamma 和 lam 取默认值",
         B=1, T=9, padding_row=False),
    edge("gamma = 1, lam = 1: Monte-Carlo returns cut at episode ends",
         "gamma = 1，lam = 1：在回合结束处截断的蒙特卡洛回报",
         B=3, T=6, gamma=1.0, lam=1.0, padding_row=False),
    edge("lam = 0: the advantages are the one-step TD errors", "lam = 0：优势就是单步 TD 误差",
         B=2, T=5, gamma=0.9, lam=0.0, padding_row=True),
)
# fmt: on


def hidden_sizes(rng, count: int) -> list[dict]:
    """B from 2 to 12, T from 2 to 33 (B != T), gamma in [0.9, 0.999], lam in [0.8, 0.99]."""
    cases = []
    for _ in range(count):
        B = rng.randrange(2, 13)
        T = rng.choice([t for t in range(2, 34) if t != B])
        gamma, lam = round(rng.uniform(0.9, 0.999), 3), round(rng.uniform(0.8, 0.99), 3)
        cases.append({"B": B, "T": T, "gamma": gamma, "lam": lam, "padding_row": rng.random() < 0.5})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)

# --------------------------------------------------------------------------- gae

GAE_INPUTS = ("rewards", "values", "dones", "last_value")
GAE_OUTPUTS = ("advantages", "returns")


def make_rollout(gen, case, dtype, device="cpu", *, dones_as="bool") -> dict:
    """rewards, values, dones (bool or 0/1 in dtype), last_value; gamma and lam when the case names them."""
    B, T = case["B"], case["T"]
    dones = torch.rand(B, T, generator=gen) < P_DONE
    dones[0, 0] = dones[0, T - 1] = True  # episodes end at the first and at the last step
    if B > 1:
        dones[B - 1, T - 1] = False  # the last row is cut by the rollout's end: last_value counts
    args = {
        "rewards": randn(gen, B, T, dtype=dtype, device=device),
        "values": randn(gen, B, T, dtype=dtype, device=device, std=2.0),
        "dones": (dones if dones_as == "bool" else dones.to(dtype)).to(device),
        "last_value": randn(gen, B, dtype=dtype, device=device, std=2.0),
    }
    return args | {k: case[k] for k in ("gamma", "lam") if k in case}


def gae_reference(rewards, values, dones, last_value, gamma=0.99, lam=0.95) -> tuple[dict, float]:
    """({advantages, returns} in the inputs' dtype and device, the size of their terms): a
    plain Python loop over rows and steps, backwards over t, on Python floats (float64)."""
    r, v = rewards.detach().double().cpu().tolist(), values.detach().double().cpu().tolist()
    d, last = dones.detach().double().cpu().tolist(), last_value.detach().double().cpu().tolist()
    B, T = rewards.shape
    advantages = [[0.0] * T for _ in range(B)]
    scale = 0.0
    for b in range(B):
        next_value, next_advantage, next_size = last[b], 0.0, 0.0
        for t in reversed(range(T)):
            not_done = 1.0 - d[b][t]
            delta = r[b][t] + gamma * next_value * not_done - v[b][t]
            next_advantage = delta + gamma * lam * not_done * next_advantage
            size = abs(r[b][t]) + gamma * abs(next_value) * not_done + abs(v[b][t])
            next_size = size + gamma * lam * not_done * next_size
            advantages[b][t] = next_advantage
            scale = max(scale, next_size + abs(v[b][t]))
            next_value = v[b][t]
    returns = [[a + value for a, value in zip(row_a, row_v)] for row_a, row_v in zip(advantages, v)]
    like = {"dtype": rewards.dtype, "device": rewards.device}
    want = {
        "advantages": torch.tensor(advantages, dtype=torch.float64).reshape(B, T).to(**like),
        "returns": torch.tensor(returns, dtype=torch.float64).reshape(B, T).to(**like),
    }
    return want, scale


def gae_tolerance(want: dict, scale: float, *, float64_throughout=False) -> dict:
    dtype = want["advantages"].dtype
    half_atol = torch.finfo(dtype).eps * float(want["advantages"].double().abs().max()) if dtype in HALF else 0.0
    return tolerance(dtype, scale, half_atol, float64_throughout=float64_throughout)


def gae_split(args: dict) -> tuple[tuple, dict]:
    """gae's call: rewards, values, dones, last_value positionally, gamma and lam by keyword when given."""
    return tuple(args[k] for k in GAE_INPUTS), {k: args[k] for k in ("gamma", "lam") if k in args}


def compare_gae(got: dict, want: dict, text: str, allowed: dict) -> None:
    """Kinds first, then values: advantages, then returns."""
    for name in GAE_OUTPUTS:
        check_tensor_kind(got[name], want[name], call=text, what=name)
    for name in GAE_OUTPUTS:
        assert_close(got[name], want[name], call=text, what=name, tolerance=allowed)


def check_gae(kata, args: dict, *, float64_throughout=False) -> None:
    want, scale = gae_reference(**args)
    allowed = gae_tolerance(want, scale, float64_throughout=float64_throughout)
    positional, keywords = gae_split(args)
    with PPO.judging(kata, *positional, symbol="gae", **keywords) as call:
        compare_gae(call.outputs, want, call.text, allowed)


@scenario
def gae_with_inputs_requiring_grad(kata, args: tuple, kwargs: dict) -> dict:
    """gae(*args, **kwargs) with rewards, values and last_value leaves that require grad:
    its result (detached, to travel as data) and, per element, whether it records a graph."""
    args = list(args)
    for index in (0, 1, 3):  # rewards, values, last_value
        args[index] = args[index].requires_grad_()
    result = kata.gae(*args, **kwargs)
    if not isinstance(result, (tuple, list)):
        return {"result": result, "graph": []}
    graph = [type(r.grad_fn).__name__ if isinstance(r, torch.Tensor) and r.requires_grad else None for r in result]
    return {"result": [r.detach() if isinstance(r, torch.Tensor) else r for r in result], "graph": graph}


# --------------------------------------------------------------------------- ppo_clip_loss

LOSS_INPUTS = ("logps", "old_logps", "advantages", "values", "old_values", "returns", "mask")
LOSS_OPTIONS = ("clip_eps", "value_clip_eps", "value_coef")
LOSS_OUTPUTS = ("total", "policy_loss", "value_loss")
ORDER = ("policy_loss", "value_loss", "total")  # total is judged last: it follows from the other two
DEFAULTS = {"clip_eps": 0.2, "value_clip_eps": 0.2, "value_coef": 0.5}
# what each result's gradient is judged for: policy_loss's of logps, value_loss's of values,
# total's of both (so policy_loss's of values and value_loss's of logps, zero, follow too)
GRADIENTS = {"policy_loss": ("logps",), "value_loss": ("values",), "total": ("logps", "values")}


def loss_options(rng, index: int) -> dict:
    """Random clip settings for even case indices (the first edge case included), the defaults otherwise."""
    if index % 2:
        return {}
    return {
        "clip_eps": rng.choice((0.1, 0.15, 0.3)),
        "value_clip_eps": rng.choice((0.1, 0.25, 0.4)),
        "value_coef": rng.choice((0.25, 0.75, 2.0)),  # never 1: a value_coef ignored would pass
    }


def make_mask(gen, case) -> torch.Tensor:
    """bool [B, T]: a counted span per row (a prompt before it, padding after), row 0 counted
    in full, and one row all padding when the case asks for it (and B > 1)."""
    B, T = case["B"], case["T"]
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        start = 0 if b == 0 else int(torch.randint(T, (1,), generator=gen))
        end = T if b == 0 else int(torch.randint(start + 1, T + 1, (1,), generator=gen))
        mask[b, start:end] = True
    if case["padding_row"] and B > 1:
        mask[B // 2] = False
    return mask


def make_batch(gen, case, dtype, device="cpu", *, mask_as="bool", options=None) -> dict:
    """The loss's inputs in dtype (see the module docstring), plus the options given."""
    options = options or {}
    clip_eps = options.get("clip_eps", DEFAULTS["clip_eps"])
    value_clip_eps = options.get("value_clip_eps", DEFAULTS["value_clip_eps"])
    B, T = case["B"], case["T"]
    f64 = torch.float64
    old_logps = -4 * torch.rand(B, T, generator=gen, dtype=f64) - 0.05
    log_ratio = randn(gen, B, T, dtype=f64, std=0.35)
    advantages = randn(gen, B, T, dtype=f64)
    old_values = randn(gen, B, T, dtype=f64, std=2.0)
    value_step = randn(gen, B, T, dtype=f64, std=0.5)
    returns = old_values + randn(gen, B, T, dtype=f64)
    mask = make_mask(gen, case)
    # the first counted tokens take each quadrant: ratio above / below the clip range with an
    # advantage of each sign, then a value above / below its clip range whose clipped squared
    # error is the larger / the smaller
    counted = mask.flatten().nonzero().flatten().tolist()
    flat = lambda t: t.view(-1)
    for slot, (lr, a) in zip(counted[:4], ((0.5, 1.0), (0.5, -1.0), (-0.5, 1.0), (-0.5, -1.0))):
        flat(log_ratio)[slot], flat(advantages)[slot] = lr, a
    step = value_clip_eps + 0.4
    for slot, (d, toward) in zip(counted[4:8], ((step, 1.5), (step, -0.5), (-step, 1.5), (-step, -0.5))):
        flat(value_step)[slot] = d
        flat(returns)[slot] = flat(old_values)[slot] + toward * d
    rounded = {
        "logps": (old_logps + log_ratio).to(dtype),
        "old_logps": old_logps.to(dtype),
        "advantages": advantages.to(dtype),
        "values": (old_values + value_step).to(dtype),
        "old_values": old_values.to(dtype),
        "returns": returns.to(dtype),
    }
    # away from every boundary, on the values as rounded: inside the range where too close
    x = {k: v.double() for k, v in rounded.items()}
    log_ratio = x["logps"] - x["old_logps"]
    near = torch.zeros(B, T, dtype=torch.bool)
    for bound in (math.log1p(clip_eps), math.log1p(-clip_eps)):
        near |= (log_ratio - bound).abs() < MARGIN
    rounded["logps"] = torch.where(near, rounded["old_logps"], rounded["logps"])
    step = x["values"] - x["old_values"]
    clipped = x["old_values"] + step.clamp(-value_clip_eps, value_clip_eps)
    plain_error, clipped_error = (x["values"] - x["returns"]) ** 2, (clipped - x["returns"]) ** 2
    outside = step.abs() > value_clip_eps  # inside the range both squared errors are one and the same
    tie = outside & ((plain_error - clipped_error).abs() < MARGIN * (1 + plain_error))
    near = ((step.abs() - value_clip_eps).abs() < MARGIN) | tie
    rounded["values"] = torch.where(near, rounded["old_values"], rounded["values"])
    rounded["mask"] = mask if mask_as == "bool" else mask.to(dtype)
    return {k: v.to(device) for k, v in rounded.items()} | options


def loss_reference(
    logps, old_logps, advantages, values, old_values, returns, mask, clip_eps=0.2, value_clip_eps=0.2, value_coef=0.5
) -> dict:
    """The kata text's formula in float64, on float64 copies (leaves that require grad where
    logps and values do): {total, policy_loss, value_loss}, float64 0-d tensors."""

    def double(t):
        return t.detach().double().requires_grad_(t.requires_grad)

    logps, values = double(logps), double(values)
    old_logps, advantages, old_values, returns = (
        t.detach().double() for t in (old_logps, advantages, old_values, returns)
    )
    weight = mask.detach().double()

    def mask_mean(x):
        return (weight * x).sum() / weight.sum()

    ratio = torch.exp(logps - old_logps)
    policy_loss = mask_mean(-torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages))
    values_clipped = old_values + torch.clamp(values - old_values, -value_clip_eps, value_clip_eps)
    value_loss = 0.5 * mask_mean(torch.max((values - returns) ** 2, (values_clipped - returns) ** 2))
    total = policy_loss + value_coef * value_loss
    return {"total": total, "policy_loss": policy_loss, "value_loss": value_loss, "_leaves": (logps, values)}


def loss_scales(args: dict) -> dict:
    """The size of the terms each result sums (see the tolerances), and each gradient's."""
    x = {k: args[k].detach().double() for k in LOSS_INPUTS}
    options = DEFAULTS | {k: args[k] for k in LOSS_OPTIONS if k in args}
    weight = x["mask"]
    count = float(weight.sum())
    ratio = torch.exp(x["logps"] - x["old_logps"])
    policy = float((weight * (ratio + 1) * x["advantages"].abs()).sum()) / count
    magnitude = x["values"].abs() + x["old_values"].abs() + x["returns"].abs()
    value = 0.5 * float((weight * magnitude**2).sum()) / count
    largest = float((ratio * x["advantages"].abs()).max()) + float(magnitude.max())
    return {
        "policy_loss": policy,
        "value_loss": value,
        "total": policy + options["value_coef"] * value,
        "gradient": largest * max(1.0, options["value_coef"]) / count,
    }


def loss_split(args: dict) -> tuple[tuple, dict]:
    """ppo_clip_loss's call: the seven tensors positionally, the options by keyword when given."""
    return tuple(args[k] for k in LOSS_INPUTS), {k: args[k] for k in LOSS_OPTIONS if k in args}


def counted(args: dict) -> dict:
    """The diagnosis's sizes: N, the number of counted entries (a sum instead of a mean is N times too large)."""
    return {"N": int(args["mask"].detach().double().sum())}


def loss_expected(args: dict) -> dict:
    reference = loss_reference(**args)
    return {name: reference[name].detach().to(args["logps"].dtype) for name in LOSS_OUTPUTS}


def compare_loss(got: dict, want: dict, text: str, allowed: dict) -> None:
    """Kinds first, then values: policy_loss, value_loss, then total."""
    for name in ORDER:
        check_tensor_kind(got[name], want[name], call=text, what=name)
    for name in ORDER:
        assert_close(got[name], want[name], call=text, what=name, tolerance=allowed[name])


def check_loss(kata, args: dict, *, float64_throughout=False) -> None:
    want, dtype, scales = loss_expected(args), args["logps"].dtype, loss_scales(args)
    allowed = {name: tolerance(dtype, scales[name], float64_throughout=float64_throughout) for name in ORDER}
    positional, keywords = loss_split(args)
    with PPO.judging(kata, *positional, symbol="ppo_clip_loss", sizes=counted(args), **keywords) as call:
        compare_loss(call.outputs, want, call.text, allowed)


def check_loss_gradients(kata, args: dict, *, float64_throughout=False) -> None:
    """Autograd through the kata against autograd through the float64 formula: the gradient
    of each result with respect to what it depends on (GRADIENTS)."""
    leafy = dict(args)
    for leaf in ("logps", "values"):
        leafy[leaf] = args[leaf].detach().clone().requires_grad_()
    reference = loss_reference(**leafy)
    dtype = args["logps"].dtype
    allowed = tolerance(dtype, loss_scales(args)["gradient"], float64_throughout=float64_throughout)
    positional, keywords = loss_split(args)
    for output, leaves in GRADIENTS.items():
        index = LOSS_OUTPUTS.index(output)
        wrt = tuple(LOSS_INPUTS.index(leaf) for leaf in leaves)
        found = torch.autograd.grad(reference[output], reference["_leaves"], retain_graph=True, allow_unused=True)
        want = {f"the gradient of `{leaf}`": grad for leaf, grad in zip(("logps", "values"), found) if leaf in leaves}
        text = PPO.text("ppo_clip_loss", positional, keywords) + f"[{index}] ({output}).backward"
        upstream = torch.ones((), dtype=dtype)
        options = {"wrt": wrt, "upstream": upstream, "output": index, "symbol": "ppo_clip_loss"}
        with PPO.judging_gradients(kata, *positional, sizes=counted(args), **options, **keywords) as got:
            for what, expected in want.items():
                assert_close(got[what], expected.to(dtype), call=text, what=what, tolerance=allowed)


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call): one PPO update's maths in float32, gae over B = 64
    rollouts of T = 256 steps, then ppo_clip_loss on them with a completion-style mask.
    PyTorch has no PPO: the reference is the formulas written here in float32, vectorised
    over the batch (GAE as the loop over t that CleanRL writes, under torch.no_grad())."""
    gen = torch.Generator().manual_seed(0)
    case = {"B": 64, "T": 256, "padding_row": False}
    rollout = make_rollout(gen, case, torch.float32, device)
    batch = make_batch(gen, case, torch.float32, device, mask_as="float")
    inputs = [rollout[k] for k in GAE_INPUTS]

    def mine():
        advantages, returns = kata.gae(*inputs)
        return kata.ppo_clip_loss(
            batch["logps"], batch["old_logps"], advantages, batch["values"], batch["old_values"], returns, batch["mask"]
        )

    def reference():
        rewards, values, dones, last_value = inputs
        with torch.no_grad():
            not_done = 1.0 - dones.float()
            advantages = torch.zeros_like(rewards)
            next_value, running = last_value, torch.zeros_like(last_value)
            for t in range(rewards.size(1) - 1, -1, -1):
                delta = rewards[:, t] + 0.99 * next_value * not_done[:, t] - values[:, t]
                running = delta + 0.99 * 0.95 * not_done[:, t] * running
                advantages[:, t] = running
                next_value = values[:, t]
            returns = advantages + values
        weight = batch["mask"]
        ratio = torch.exp(batch["logps"] - batch["old_logps"])
        policy = -torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
        clipped = batch["old_values"] + (batch["values"] - batch["old_values"]).clamp(-0.2, 0.2)
        value = torch.max((batch["values"] - returns) ** 2, (clipped - returns) ** 2)
        count = weight.sum()
        policy_loss, value_loss = (weight * policy).sum() / count, 0.5 * (weight * value).sum() / count
        return policy_loss + 0.5 * value_loss, policy_loss, value_loss

    return mine, reference


SPEC = KataSpec(
    kata="ppo",
    symbol="gae",
    reference="the kata's formulas in float64: GAE as a plain Python loop, the clipped losses with autograd",
    forbidden=NONE,
    also={"ppo_clip_loss": NONE},
    tolerances={dtype: tolerance(dtype) for dtype in (*FULL, *HALF)},
    tolerance_note=(
        f"shown for terms of size 1: atol is {ROUNDING} eps of the computation dtype (float64's for float64, "
        "float32's for the others) times the size of the terms each result sums (terms that cancel: "
        "discounted |r| + |V| for GAE, mask-means of |ratio * A| and (|V| + |V_old| + |R|)^2 for the "
        "losses, the largest term over sum(mask) for gradients); half precision adds two ulps of rtol "
        "(and one ulp of the largest advantage for GAE): the solution and variants measured at most 0.18 "
        "of it in float32 and float64 (a float64 input computed through float32: 4.8e7), 0.45 in half "
        "precision (GAE computed in the half dtype: 1.7x to 2.3x)"
    ),
    cases=CASES,
    benchmark=benchmark,
)
PPO = FunctionKata(
    SPEC,
    outputs={"gae": pair(*GAE_OUTPUTS), "ppo_clip_loss": tuple_of(*LOSS_OUTPUTS)},
    parameters={"gae": (*GAE_INPUTS, "gamma", "lam"), "ppo_clip_loss": (*LOSS_INPUTS, *LOSS_OPTIONS)},
)

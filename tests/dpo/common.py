"""dpo: what its tests share: the SPEC, the float64 references, the cases, the checks.

sequence_log_probs is judged against F.cross_entropy on the shifted logits and labels,
dpo_loss against the sigmoid loss written with F.logsigmoid (TRL's), both in float64.

sequence_log_probs(logits [B, T, V], labels [B, T], ignore_index): the reference is
-F.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:], ignore_index=...,
reduction="none").sum(-1) on the logits converted to float64 (exact for every dtype under
test), rounded to the logits' dtype. Labels are laid out as a preference batch's are: each
row a prompt (ignored) of its own length, then response tokens, then padding (ignored);
ignore_index is -100 or a custom value that is itself a legal token (0, V - 1) or -1.
Logits are ordinary (N(0, 3^2)), large (each position offset by up to +-7000, its tokens
spread by N(0, 1000^2): log(softmax) underflows to -inf there), or confident (each kept
label's token 8 above the rest: log-probabilities near 0, which a log-softmax computed in
half precision gets wrong). Half-precision logits are computed in float32. A sequence with
nothing to predict (T = 1, a row whose every label is ignored) is a convention, judged on
the named cases of DEGENERATE.

dpo_loss(pi_c, pi_r, ref_c, ref_r, beta, label_smoothing): the reference is the kata's
formula in float64 with F.logsigmoid, on the inputs converted to float64, rounded to their
dtype. Log-probabilities are those of sequences (-5 to -400), the reference model's within
a few nats of the policy's; the stability test sets beta * z from -1e3 to 1e3 (beta from
0.1 to 2), where log(sigmoid(x)) is log(0) = -inf in float32 and float64 alike. Half
precision is computed in float32 here too: z subtracts log-probabilities of hundreds,
whose differences bfloat16 rounds by whole units.

Gradients (autograd through the learner's functions against autograd through the
references, in float64 and float32) are judged for the logits, for all four
log-probabilities (the reference ones flow through z too), and end to end from the DPO
loss back to the policy's logits (the scenario `end_to_end`). The rewards must not require
grad (the scenario `dpo_loss_with_inputs_requiring_grad`). Every other call runs in the
kata process through FunctionKata.

PyTorch has no DPO: nothing is forbidden (F.log_softmax, F.cross_entropy, F.logsigmoid and
F.softplus are all fair).

Tolerances: see the comment above ROUNDING, with the measured figures.
"""

import math

import torch
import torch.nn.functional as F

from judge.forbidden import NONE
from judge.testing.checks import check_tensor_kind
from judge.testing.functions import FunctionKata, computation_eps, tuple_of
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge

FULL = (torch.float64, torch.float32)  # float64 first: the edge cases show first in it
HALF = (torch.float16, torch.bfloat16)
ORDINARY = 3.0  # std of ordinary logits: the softmax neither flat nor saturated
LARGE_OFFSET, LARGE_SPREAD = 7000.0, 1000.0  # large logits: per-position offset, per-token spread
# a confident model: logits N(0, 1), each kept label's token CONFIDENCE above them, so
# each log-probability is about -0.003: a log-softmax or log-sum-exp computed in float16 or
# bfloat16 rounds it away at the logits' scale (F.log_softmax rounds the sum of the exps,
# 1.003, to 1), beyond the tolerance in 200 draws out of 200 in each dtype
CONFIDENCE, CONFIDENT_STD = 8.0, 1.0
NAMES = ("policy_chosen_logps", "policy_rejected_logps", "reference_chosen_logps", "reference_rejected_logps")
RESULTS = ("losses", "chosen_rewards", "rejected_rewards")
BETAS = (0.1, 0.5, 0.05, 1.0, 2.0)
# beta * z in the stability test, a batch starting at -1000 or -750 (log(sigmoid) is -inf
# there even in float64) and going round
EXTREMES = (-1000.0, 1000.0, -750.0, 750.0, -120.0, 120.0, -30.0, 30.0)

# --------------------------------------------------------------------------- tolerances
#
# sequence_log_probs: each kept token's log-probability is (x_t - max) - log(sum exp(x - max)),
# whose terms are at most about max|logit| + log V: an honest computation in a dtype with
# machine epsilon eps is off by a few eps * (max|logit| + log V) per token (one that forms
# the log-sum-exp as max + log(sum) first included), summed over the row's kept tokens:
# atol = ROUNDING * eps * M * count, with M = max|logit| + log V + 1 and count = the
# largest number of kept (shifted) labels in a row. eps is the computation dtype's
# (float64's for float64 logits, float32's for every other dtype); half-precision results
# add rtol = RESULT_ULPS ulps of their own dtype. The gradient, upstream * (one-hot -
# softmax), is off by eps * M per element at most (a softmax taken as exp(x - lse), lse
# rounded at the logits' scale, as torch.logsumexp's backward does): atol =
# LOGITS_GRADIENT_ROUNDING * eps * M * max|upstream|.
#
# dpo_loss: z subtracts log-probabilities of several hundreds, so it is off by up to eps *
# S, with S = |pi_c| + |pi_r| + |ref_c| + |ref_r| (the largest over the batch), depending on
# the order of the subtractions (pi_c - pi_r - ref_c + ref_r, left to right, rounds at the
# scale of ref_c); beta * z by beta * eps * S, and the loss (whose slope in beta * z is at
# most 1) as much: atol = DPO_ROUNDING * eps * beta * S + TAIL, rtol = DPO_ROUNDING * eps.
# TAIL accepts F.softplus(-beta * z), an equally stable form whose default threshold
# returns x itself above 20, dropping log1p(exp(-20)) = 2.1e-9 (far below float32's
# resolution, above float64's). The rewards: atol = DPO_ROUNDING * eps * beta * (|pi| +
# |ref|). eps is the computation dtype's, as above; half-precision results add RESULT_ULPS
# ulps of rtol.
# The gradient of a loss with respect to each log-probability is upstream * beta * (a
# sigmoid of beta * z), off by eps + (the slope of the sigmoid, at most 1/4) * beta * (the
# error of z): atol = GRADIENT_ROUNDING * eps * beta * (1 + beta * S / 4) * max|upstream|
# (+ beta * TAIL), a first-order bound taken as it is. End to end, from the loss back to
# the logits, both errors add, and z also carries the errors of the two sequence
# log-probabilities (about eps * count * M each): atol = max|upstream| * beta * eps *
# (LOGITS_GRADIENT_ROUNDING * M + GRADIENT_ROUNDING * (1 + beta * (S + 2 * count * M) / 4)).
#
# Measured over 100 seeds x every case and kind of the tests below, on the solution, both
# variants (F.cross_entropy with F.softplus; a loop with a hand-written log-sum-exp and
# log-sigmoid) and a fourth honest form (z = pi_c - pi_r - ref_c + ref_r left to right,
# the rewards as beta * pi - beta * ref), worst error as a fraction of these tolerances:
#   log-probabilities: float64 0.12, float32 0.12, float16 0.22, bfloat16 0.26 (the
#   confident case, final rounding);
#   their gradient: float64 0.23, float32 0.20 (the torch.logsumexp forms; the others 0.14);
#   losses: float64 0.51 (F.softplus's 2.1e-9 against TAIL; every other form 6e-5),
#   float32 0.14, half precision 0 (each form rounds to the reference's half value);
#   rewards at most 0.13;
#   gradients of the four log-probabilities: float64 0.45 (F.softplus), float32 0.17;
#   end to end, back to the logits: float64 0.20 (F.softplus), float32 0.093.
# A float64 input computed in float32 is off by about 1e-7 relative: over 1e3 times these
# (float64) tolerances; half-precision logits log-softmaxed in their own dtype miss the
# confident case's log-probabilities (see CONFIDENCE). The core tier computes every eps
# below as float32's for float64 results (FLOAT64_RULE: a float32 step is the math right);
# the float64 rule's test (float64_throughout) holds them to float64's.
ROUNDING = 8  # sequence_log_probs
LOGITS_GRADIENT_ROUNDING = 2  # its gradient
DPO_ROUNDING = 4  # the losses and the rewards
GRADIENT_ROUNDING = 1  # the gradients of dpo_loss: the first-order bound above as it is
RESULT_ULPS = 2
TAIL = 4e-9


def eps_of(dtype: torch.dtype, float64_throughout: bool) -> float:
    """The computation's eps for a result of `dtype`: float32's for float64 in the core tier."""
    return computation_eps(core_dtype(dtype, float64_throughout))


def half_rtol(dtype: torch.dtype) -> float:
    return RESULT_ULPS * torch.finfo(dtype).eps if dtype in HALF else 0.0


def logit_scale(*logits: torch.Tensor) -> float:
    """M = max|logit| + log V + 1."""
    largest = max((float(x.detach().double().abs().max()) for x in logits if x.numel()), default=0.0)
    return largest + math.log(logits[0].size(-1)) + 1


def kept_count(labels: torch.Tensor, ignore_index=-100) -> int:
    """The largest number of kept (shifted) labels in a row, at least 1."""
    return max(1, int((labels[:, 1:] != ignore_index).sum(-1).max())) if labels.numel() else 1


def log_probs_tolerance(logits, labels, ignore_index=-100, *, float64_throughout=False) -> dict:
    eps = eps_of(logits.dtype, float64_throughout)
    return {
        "rtol": half_rtol(logits.dtype),
        "atol": ROUNDING * eps * logit_scale(logits) * kept_count(labels, ignore_index),
    }


def log_probs_gradient_tolerance(logits, upstream, *, float64_throughout=False) -> dict:
    scale = float(upstream.abs().max())
    eps = eps_of(logits.dtype, float64_throughout)
    return {"rtol": 0.0, "atol": LOGITS_GRADIENT_ROUNDING * eps * logit_scale(logits) * scale}


def spreads(logps: dict) -> dict:
    """The largest |pi_c| + |pi_r| + |ref_c| + |ref_r|, |pi_c| + |ref_c| and |pi_r| + |ref_r| of a pair."""
    a = {name: value.detach().double().abs() for name, value in logps.items()}
    return {
        "losses": float((a[NAMES[0]] + a[NAMES[1]] + a[NAMES[2]] + a[NAMES[3]]).max()),
        "chosen_rewards": float((a[NAMES[0]] + a[NAMES[2]]).max()),
        "rejected_rewards": float((a[NAMES[1]] + a[NAMES[3]]).max()),
    }


def loss_tolerance(dtype: torch.dtype, beta: float = 0.1, spread: float = 1.0, *, float64_throughout=False) -> dict:
    """(rtol, atol) for the losses: spread = S, the largest |pi_c| + |pi_r| + |ref_c| + |ref_r| of a pair."""
    eps = eps_of(dtype, float64_throughout)
    return {"rtol": DPO_ROUNDING * eps + half_rtol(dtype), "atol": DPO_ROUNDING * eps * beta * spread + TAIL}


def reward_tolerance(dtype: torch.dtype, beta: float, spread: float, *, float64_throughout=False) -> dict:
    """(rtol, atol) for a reward: spread = the largest |pi| + |ref| of the pair it belongs to."""
    eps = eps_of(dtype, float64_throughout)
    return {"rtol": DPO_ROUNDING * eps + half_rtol(dtype), "atol": DPO_ROUNDING * eps * beta * spread}


def dpo_tolerances(logps: dict, beta: float, *, float64_throughout=False) -> dict:
    dtype, spread, f64 = logps[NAMES[0]].dtype, spreads(logps), float64_throughout
    return {
        "losses": loss_tolerance(dtype, beta, spread["losses"], float64_throughout=f64),
        "chosen_rewards": reward_tolerance(dtype, beta, spread["chosen_rewards"], float64_throughout=f64),
        "rejected_rewards": reward_tolerance(dtype, beta, spread["rejected_rewards"], float64_throughout=f64),
    }


def dpo_gradient_tolerance(logps: dict, beta: float, upstream, *, float64_throughout=False) -> dict:
    dtype, scale, spread = logps[NAMES[0]].dtype, float(upstream.abs().max()), spreads(logps)["losses"]
    eps = eps_of(dtype, float64_throughout)
    atol = (GRADIENT_ROUNDING * eps * beta * (1 + beta * spread / 4) + beta * TAIL) * scale
    return {"rtol": DPO_ROUNDING * eps + half_rtol(dtype), "atol": atol}


def end_to_end_tolerance(logits: tuple, labels: tuple, logps: dict, beta: float, upstream) -> dict:
    eps, scale, spread = eps_of(logits[0].dtype, False), float(upstream.abs().max()), spreads(logps)["losses"]
    M, count = logit_scale(*logits), max(kept_count(x) for x in labels)
    z_error = spread + 2 * count * M  # z's rounding, and the two log-probabilities' own
    through_softmax = LOGITS_GRADIENT_ROUNDING * eps * beta * M
    through_z = GRADIENT_ROUNDING * eps * beta * (1 + beta * z_error / 4)
    atol = (through_softmax + through_z + beta * TAIL) * scale
    return {"rtol": 0.0, "atol": atol}


# --------------------------------------------------------------------------- the case table
#
# Sizes: B (sequences, or preference pairs for dpo_loss), T (positions), V (vocabulary);
# empty_row: the second row's labels are all ignored.

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("prompts and padding ignored, odd sizes", "忽略提示词和填充，奇数尺寸",
         B=3, T=9, V=11),
    # log-probabilities near 0, which a log-softmax computed in half precision misses
    edge("a confident model: each label's token 8 above the rest", "高置信度模型：每个标签的 token 比其余高 8",
         B=4, T=13, V=9, confident=True),
    edge("one sequence (B = 1), T = 2: a single prediction", "一个序列（B = 1），T = 2：只有一次预测",
         B=1, T=2, V=7),
    edge("one token in the vocabulary (V = 1): every log-probability is 0",
         "词表只有一个 token（V = 1）：每个对数概率都是 0",
         B=2, T=5, V=1),
)
# fmt: on
# sequences with nothing to predict: a convention, judged on these named cases every time
# fmt: off
DEGENERATE = (
    edge("T = 1: nothing to predict, every sum is 0", "T = 1：没有可预测的内容，每个和都是 0",
         B=4, T=1, V=6),
    edge("a row whose every label is ignored (its sum is 0)", "某一行的标签全部被忽略（其和为 0）",
         B=3, T=6, V=5, empty_row=True),
)
# fmt: on


def hidden_sizes(rng, count: int) -> list[dict]:
    """B from 2 to 8, T from 2 to 23, V from 2 to 39, the three different."""
    cases = []
    for _ in range(count):
        B = rng.randrange(2, 9)
        T = rng.choice([t for t in range(2, 24) if t != B])
        V = rng.choice([v for v in range(2, 40) if v not in (B, T)])
        cases.append({"B": B, "T": T, "V": V})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


def sizes(case) -> dict:
    return {k: case[k] for k in ("B", "T", "V")}


# --------------------------------------------------------------------------- inputs


def make_labels(gen, case, ignore_index=-100) -> torch.Tensor:
    """[B, T] int64: each row a prompt of its own length (ignored; it may be empty), response
    tokens, then padding (ignored; always some in the first row when T >= 3); kept labels
    never hold ignore_index."""
    B, T, V = case["B"], case["T"], case["V"]
    tokens = [c for c in range(V) if c != ignore_index]
    labels = torch.tensor(tokens, dtype=torch.int64)[torch.randint(len(tokens), (B, T), generator=gen)]
    start = torch.randint(0, T // 2 + 1, (B, 1), generator=gen)  # the prompt: positions < start
    length = torch.randint(1, T + 1, (B, 1), generator=gen)  # the response: start .. start + length - 1
    positions = torch.arange(T)
    ignored = (positions < start) | (positions >= start + length)
    if T >= 3:
        ignored[0, -1] = True  # the first row always ends with padding: some label past the first is ignored
    if case.get("empty_row"):
        ignored[1] = True
    return labels.masked_fill(ignored, ignore_index)


def make_inputs(gen, case, dtype=torch.float32, device="cpu", ignore_index=-100, *, large=False):
    """(logits [B, T, V], labels [B, T]): ordinary N(0, 3^2) logits, or large ones (each
    position offset by up to +-7000, its tokens spread by 1000: up to about 1e4). A
    "confident" case draws N(0, 1) logits and raises the logit of every kept label's token by
    CONFIDENCE at the position that predicts it: log-probabilities near 0."""
    B, T, V = case["B"], case["T"], case["V"]
    labels = make_labels(gen, case, ignore_index)
    x = randn(gen, B, T, V, dtype=torch.float64, std=CONFIDENT_STD if case.get("confident") else ORDINARY)
    if large:
        offset = (torch.rand(B, T, 1, generator=gen, dtype=torch.float64) * 2 - 1) * LARGE_OFFSET
        x = offset + x * (LARGE_SPREAD / ORDINARY)
    if case.get("confident") and T > 1:
        kept = labels[:, 1:] != ignore_index
        boost = torch.zeros(B, T - 1, V, dtype=torch.float64)
        boost.scatter_(-1, labels[:, 1:].masked_fill(~kept, 0).unsqueeze(-1), CONFIDENCE * kept.unsqueeze(-1).double())
        x[:, :-1] += boost
    return x.to(dtype=dtype, device=device), labels.to(device)


def custom_ignore_index(rng, case, index: int | None = None) -> int:
    """A custom ignore_index: a legal token (V - 1 or 0) when V allows it, or -1; the
    index-th of these (cycling) when an index is given, else one at random."""
    choices = (case["V"] - 1, 0, -1) if case["V"] >= 2 else (-1,)
    return rng.choice(choices) if index is None else choices[index % len(choices)]


def make_logps(gen, B: int, dtype=torch.float64, device="cpu") -> dict:
    """The four [B] log-probabilities of B pairs: the policy's between -5 and -400, the
    reference model's within N(0, 5^2) of them (so beta * z is of order 1 for beta 0.1)."""
    policy = -(5 + 395 * torch.rand(2, B, generator=gen, dtype=torch.float64))
    reference = (policy + randn(gen, 2, B, dtype=torch.float64, std=5.0)).clamp(max=-0.5)
    values = (policy[0], policy[1], reference[0], reference[1])
    return {name: value.to(dtype=dtype, device=device) for name, value in zip(NAMES, values)}


def make_extreme_logps(gen, B: int, beta: float, dtype=torch.float64, device="cpu") -> dict:
    """Four [B] log-probabilities whose beta * z runs through EXTREMES (up to +-1e3), all
    negative, as log-probabilities are."""
    shift = 2 * int(torch.randint(2, (1,), generator=gen))
    targets = torch.tensor([EXTREMES[(b + shift) % len(EXTREMES)] for b in range(B)])
    z = targets.double() / beta
    pi_c, pi_r, ref_r = (-(5 + 395 * torch.rand(3, B, generator=gen, dtype=torch.float64))).unbind()
    ref_c = ref_r + (pi_c - pi_r) - z  # so that (pi_c - pi_r) - (ref_c - ref_r) = z
    lift = (ref_c + 5).clamp(min=0)  # move the reference pair down together where ref_c > -5
    values = (pi_c, pi_r, ref_c - lift, ref_r - lift)
    return {name: value.to(dtype=dtype, device=device) for name, value in zip(NAMES, values)}


def dpo_kwargs(rng, *, smoothing: bool) -> dict:
    """beta left at its default (0.1) or passed (another value); label_smoothing passed when asked."""
    beta = rng.choice(BETAS)
    kwargs = {} if beta == 0.1 else {"beta": beta}
    if smoothing:
        kwargs["label_smoothing"] = rng.choice((0.1, round(rng.uniform(0.02, 0.45), 3)))
    return kwargs


# --------------------------------------------------------------------------- references


def reference_log_probs(logits, labels, ignore_index=-100) -> torch.Tensor:
    """-F.cross_entropy on the shifted logits and labels in float64, summed over each row
    (ignored labels give 0), rounded to the logits' dtype."""
    shifted = logits.double()[:, :-1].transpose(1, 2)  # (B, V, T - 1): F.cross_entropy's class dim is 1
    nll = F.cross_entropy(shifted, labels[:, 1:], ignore_index=ignore_index, reduction="none")  # (B, T - 1)
    return (-nll.sum(dim=-1)).to(logits.dtype)


def reference_dpo(logps: dict, beta=0.1, label_smoothing=0.0, *, rounded=True) -> dict:
    """The kata's formula with F.logsigmoid, on the inputs in float64."""
    pi_c, pi_r, ref_c, ref_r = (logps[name].double() for name in NAMES)
    z = (pi_c - pi_r) - (ref_c - ref_r)
    losses = -F.logsigmoid(beta * z) * (1 - label_smoothing) - F.logsigmoid(-beta * z) * label_smoothing
    results = {"losses": losses, "chosen_rewards": beta * (pi_c - ref_c), "rejected_rewards": beta * (pi_r - ref_r)}
    dtype = logps[NAMES[0]].dtype
    return {k: v.detach().to(dtype) for k, v in results.items()} if rounded else results


def reference_log_probs_gradient(logits, labels, upstream, ignore_index=-100) -> torch.Tensor:
    twin = logits.detach().double().requires_grad_()
    with torch.enable_grad():
        (reference_log_probs(twin, labels, ignore_index) * upstream.double()).sum().backward()
    return twin.grad.to(logits.dtype)


def dpo_reference_gradients(logps: dict, upstream, **kwargs) -> dict:
    leaves = {name: value.detach().double().requires_grad_() for name, value in logps.items()}
    with torch.enable_grad():
        losses = reference_dpo(leaves, **kwargs, rounded=False)["losses"]
        grads = torch.autograd.grad((losses * upstream.double()).sum(), list(leaves.values()))
    dtype = logps[NAMES[0]].dtype
    return {f"the gradient of `{name}`": g.to(dtype) for name, g in zip(NAMES, grads)}


# --------------------------------------------------------------------------- scenarios


@scenario
def end_to_end(kata, logits: tuple, labels: tuple, reference: tuple, upstream, kwargs: dict) -> dict:
    """The chosen and rejected policy logits (leaves that require grad) -> sequence_log_probs
    -> dpo_loss against the fixed reference log-probabilities -> the losses dotted with
    upstream -> backward: whether the losses required grad, and the logits' gradients."""
    chosen, rejected = (x.requires_grad_() for x in logits)
    chosen_logps = kata.sequence_log_probs(chosen, labels[0])
    rejected_logps = kata.sequence_log_probs(rejected, labels[1])
    result = kata.dpo_loss(chosen_logps, rejected_logps, *reference, **kwargs)
    losses = result[0] if isinstance(result, (tuple, list)) and result else result
    if not isinstance(losses, torch.Tensor) or not losses.requires_grad:
        return {"requires_grad": False, "grads": {}}
    (losses * upstream).sum().backward()
    return {"requires_grad": True, "grads": {"chosen logits": chosen.grad, "rejected logits": rejected.grad}}


@scenario
def dpo_loss_with_inputs_requiring_grad(kata, args: tuple, kwargs: dict) -> dict:
    """dpo_loss with its four inputs leaves that require grad: its results (detached, to
    travel as data) and whether each requires grad."""
    result = kata.dpo_loss(*(a.requires_grad_() for a in args), **kwargs)
    if not isinstance(result, (tuple, list)):
        return {"result": result, "requires_grad": []}
    flags = [bool(getattr(r, "requires_grad", False)) for r in result]
    return {"result": [r.detach() if isinstance(r, torch.Tensor) else r for r in result], "requires_grad": flags}


# --------------------------------------------------------------------------- the spec


def benchmark(kata, device):
    """(kata call, reference call) at a preference batch's size: 4 pairs, chosen and rejected
    concatenated into logits [8, 256, 8192] in float32, each row a prompt of 64 to 127
    tokens (ignored), then its response and padding; then the loss of the 4 pairs against
    fixed reference log-probabilities. PyTorch has no DPO: the reference is the vectorised
    float32 formula as TRL writes it (each label's logit gathered, minus torch.logsumexp
    over the vocabulary, masked and summed per row; then F.logsigmoid)."""
    gen = torch.Generator().manual_seed(0)
    B, T, V = 8, 256, 8192
    logits = randn(gen, B, T, V, device=device, std=ORDINARY)
    labels = torch.randint(V, (B, T), generator=gen)
    positions = torch.arange(T)
    prompt = torch.randint(64, 128, (B, 1), generator=gen)
    end = torch.randint(192, T + 1, (B, 1), generator=gen)
    labels = labels.masked_fill((positions < prompt) | (positions >= end), -100).to(device)
    reference_logps = (-(100 + 300 * torch.rand(B, generator=gen))).to(device)

    def mine():
        logps = kata.sequence_log_probs(logits, labels)
        return kata.dpo_loss(logps[:4], logps[4:], reference_logps[:4], reference_logps[4:])

    def reference():
        shifted, targets = logits[:, :-1], labels[:, 1:]
        keep = targets != -100
        picked = shifted.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
        logps = ((picked - torch.logsumexp(shifted, dim=-1)) * keep).sum(-1)
        z = (logps[:4] - logps[4:]) - (reference_logps[:4] - reference_logps[4:])
        chosen, rejected = 0.1 * (logps[:4] - reference_logps[:4]), 0.1 * (logps[4:] - reference_logps[4:])
        return -F.logsigmoid(0.1 * z), chosen.detach(), rejected.detach()

    return mine, reference


SPEC = KataSpec(
    kata="dpo",
    symbol="dpo_loss",
    reference=(
        "sequence_log_probs: -F.cross_entropy(reduction='none') on the shifted logits and labels in float64, "
        "summed per row; dpo_loss: the sigmoid loss with F.logsigmoid in float64 (TRL's)"
    ),
    forbidden=NONE,  # PyTorch has no DPO to delegate to
    also={"sequence_log_probs": NONE},
    tolerances={dtype: loss_tolerance(dtype, 0.1, 1000.0, float64_throughout=True) for dtype in (*FULL, *HALF)},
    tolerance_note=(
        "dpo_loss's losses, shown for beta 0.1 and |pi_c| + |pi_r| + |ref_c| + |ref_r| = 1000: atol "
        f"{DPO_ROUNDING} eps * beta * that sum (z subtracts log-probabilities of hundreds) + {TAIL:g} "
        f"(F.softplus's threshold), rtol {DPO_ROUNDING} eps, eps of the computation (float32 for half precision, "
        "plus 2 ulps); "
        f"sequence_log_probs: atol {ROUNDING} eps(compute) * (max|logit| + log V + 1) * the kept tokens of a "
        "row, half precision computed in float32 plus 2 ulps; gradients from first-order bounds. The solution, "
        "variants and a fourth honest form measured at most 0.20 of these in float32, 0.26 in half precision "
        "(0.51 in float64: F.softplus's threshold)"
    ),
    cases=CASES,
    benchmark=benchmark,
)
DPO = FunctionKata(
    SPEC,
    outputs={"dpo_loss": tuple_of(*RESULTS), "sequence_log_probs": "log-probabilities"},
    parameters={
        "dpo_loss": (*NAMES, "beta", "label_smoothing"),
        "sequence_log_probs": ("logits", "labels", "ignore_index"),
    },
)


# --------------------------------------------------------------------------- checks


def check_log_probs(kata, case, logits, labels, *, float64_throughout=False, **kwargs) -> None:
    want = reference_log_probs(logits, labels, **kwargs)
    tolerance = log_probs_tolerance(
        logits, labels, kwargs.get("ignore_index", -100), float64_throughout=float64_throughout
    )
    with DPO.judging(kata, logits, labels, symbol="sequence_log_probs", sizes=sizes(case), **kwargs) as call:
        SPEC.assert_close(
            call["log-probabilities"], want, call=call.text, what="log-probabilities", tolerance=tolerance
        )


def check_dpo(kata, logps: dict, *, float64_throughout=False, **kwargs) -> None:
    """The three results, each against the float64 formula: kinds first, then the losses, then the rewards."""
    want = reference_dpo(logps, **kwargs)
    tolerances = dpo_tolerances(logps, kwargs.get("beta", 0.1), float64_throughout=float64_throughout)
    with DPO.judging(kata, *(logps[name] for name in NAMES), **kwargs) as call:
        for name in RESULTS:
            check_tensor_kind(call[name], want[name], call=call.text, what=name)
        for name in RESULTS:
            SPEC.assert_close(call[name], want[name], call=call.text, what=name, tolerance=tolerances[name])


def check_log_probs_gradient(kata, case, logits, labels, upstream, *, float64_throughout=False, **kwargs) -> None:
    """Autograd through the kata against autograd through F.cross_entropy on the shifted logits."""
    want = reference_log_probs_gradient(logits, labels, upstream, **kwargs)
    tolerance = log_probs_gradient_tolerance(logits, upstream, float64_throughout=float64_throughout)
    text = DPO.text("sequence_log_probs", (logits, labels), kwargs) + ".backward"
    what = "the gradient of `logits`"
    options = {"wrt": (0,), "upstream": upstream, "symbol": "sequence_log_probs", "sizes": sizes(case)}
    with DPO.judging_gradients(kata, logits, labels, **options, **kwargs) as got:
        SPEC.assert_close(got[what], want, call=text, what=what, tolerance=tolerance)


def check_dpo_gradients(kata, logps: dict, upstream, *, float64_throughout=False, **kwargs) -> None:
    """Autograd through the kata against autograd through the formula with F.logsigmoid, for all four inputs."""
    want = dpo_reference_gradients(logps, upstream, **kwargs)
    beta = kwargs.get("beta", 0.1)
    tolerance = dpo_gradient_tolerance(logps, beta, upstream, float64_throughout=float64_throughout)
    args = tuple(logps[name] for name in NAMES)
    text = DPO.text("dpo_loss", args, kwargs) + ".backward"
    with DPO.judging_gradients(kata, *args, wrt=(0, 1, 2, 3), upstream=upstream, output=0, **kwargs) as got:
        for what, expected in want.items():
            SPEC.assert_close(got[what], expected, call=text, what=what, tolerance=tolerance)

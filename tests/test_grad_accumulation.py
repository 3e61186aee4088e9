"""grad_accumulation: accumulate_and_step judged against one step on the whole batch, in float64.

Each check is ONE scenario played where the kata lives (`stepping`): a TinyLM (below: an
embedding, a frozen gain, a tanh layer, a head giving logits [B, T, V], and a parameter the
forward never uses) is built from a state dict, an optimizer of a named class and
hyperparameters is made over its parameters, stale .grad values are set where the case asks,
then accumulate_and_step runs once; the scenario returns what it returned, the parameters
after the step, which .grad are not None afterwards, and the micro-batches as the call left
them. The reference, here: the same TinyLM in float64, ONE forward on the micro-batches
concatenated, F.cross_entropy(ignore_index) (the mean over every valid token),
torch.nn.utils.clip_grad_norm_ (max_norm=inf when None: the norm), the same optimizer step.

Where each slip shows (the named edge cases, most telling first):
- the mean of each micro-batch's mean (sum / K) or no division: differ only when the valid
  counts differ (`unequal valid tokens`, `an empty micro-batch`: the mean of nothing is NaN);
  seen in the loss and the norm, and in the step with SGD (AdamW's first step is invariant to
  the gradient's scale: g / (|g| + eps), eps here 1% of the largest grad);
- clipping inside the loop, per parameter, or with the norm summed: only when clipping acts
  (`clipped`), in the norm returned and in SGD's step; clipping that scales up: `norm below
  max_norm`; the 1e-6 forgotten: `a small gradient norm` (every weight ~ 1e-3: the norm ~ 1e-3, so 1e-6 is 0.1%);
- zero_grad inside the loop: every case with two or more micro-batches; no zero_grad at the
  start: `stale grads`; ignore_index not passed to the loss: `ignore_index=0`.

Tolerances: see `tolerances` below, measured figures above them.
"""

import copy
import math

import torch
import torch._dynamo  # noqa: F401 - what every optimizer's first add_param_group imports (1 s): once, in the warm process
import torch.nn.functional as F
from torch import Tensor, nn

from judge.forbidden import GRAD_CLIPPING, ForbiddenCallError
from judge.language import pick
from judge.testing.checks import Mismatch, assert_close, check_tensor_kind, describe
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, core_dtype, dtypes, edge
from judge.testing.tiers import convention, core
from judge.testing.tolerances import per_dtype

FULL = (torch.float32, torch.float64)
NAMES = ("embed.weight", "gain", "hidden.weight", "hidden.bias", "head.weight", "unused")
TRAINABLE = ("embed.weight", "hidden.weight", "hidden.bias", "head.weight")


class TinyLM(nn.Module):
    """logits [B, T, V] = head(tanh(hidden(embed(x) * gain))); `gain` is frozen (requires_grad
    False), `unused` never takes part in the forward: neither ever gets a gradient."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gain = nn.Parameter(torch.ones(dim), requires_grad=False)
        self.hidden = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)  # as GPT-2's lm_head
        self.unused = nn.Parameter(torch.zeros(3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.tanh(self.hidden(self.embed(x) * self.gain)))


def build(state: dict) -> TinyLM:
    vocab, dim = state["head.weight"].shape
    with torch.random.fork_rng(devices=[]):
        model = TinyLM(vocab, dim).to(state["head.weight"].dtype)
    model.load_state_dict(state)
    return model


OPTIMIZERS = {"SGD": torch.optim.SGD, "AdamW": torch.optim.AdamW}


def detached(value):
    return value.detach() if isinstance(value, Tensor) else value


@scenario
def stepping(kata, state: dict, optimizer: tuple, micro_batches: list, keywords: dict, stale: dict) -> dict:
    """accumulate_and_step(model, optimizer, micro_batches, **keywords) on build(state) with
    `stale` grads set first: what it returned, the parameters after, which .grad are not None
    after, the micro-batches as the call left them."""
    model = build(state)
    for name, grad in stale.items():
        model.get_parameter(name).grad = grad.clone()
    kind, hyper = optimizer
    result = kata.accumulate_and_step(model, OPTIMIZERS[kind](model.parameters(), **hyper), micro_batches, **keywords)
    listed = isinstance(result, (tuple, list))
    return {
        "returned": [detached(v) for v in result] if listed else detached(result),
        "kinds": [type(v).__name__ for v in result] if listed else [type(result).__name__],
        "params": {name: p.detach() for name, p in model.named_parameters()},
        "grads left": [name for name, p in model.named_parameters() if p.grad is not None],
        "micro_batches": micro_batches,
    }


@scenario
def raising(kata, state: dict, micro_batches: list, keywords: dict) -> str:
    """What accumulate_and_step did: "raised <type>" or "returned"; the stub's NotImplementedError
    and the guard's refusals propagate."""
    model = build(state)
    try:
        kata.accumulate_and_step(model, torch.optim.SGD(model.parameters(), lr=0.1), micro_batches, **keywords)
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - which exception is the observation
        return f"raised {type(error).__name__}"
    return "returned"


# --------------------------------------------------------------------------- the case tables

# B: each micro-batch's size; T, V, E; ignored: each micro-batch's fraction of ignore_index
# targets (1.0: none valid); opt: SGD, SGD+momentum (nesterov, decay) or AdamW; clip: None,
# "inf", or max_norm as a fraction of the true norm; stale: .grad set before the call;
# ignore_index; scale: every weight's size (1e-3: a gradient norm ~ 1e-3, so the 1e-6 shows).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("unequal valid tokens: one micro-batch 90% ignore_index", "有效 token 数不等：一个微批次 90% 是 ignore_index",
         B=[2, 2, 2], T=10, V=7, E=5, ignored=[0.0, 0.9, 0.3], opt="SGD", clip=None, stale=False,
         ignore_index=-100, scale=1.0),
    edge("an empty micro-batch: no valid token in the last one", "有一个空的微批次：最后一个没有有效 token",
         B=[3, 2, 2], T=5, V=6, E=4, ignored=[0.2, 0.5, 1.0], opt="SGD", clip=None, stale=False,
         ignore_index=-100, scale=1.0),
    edge("clipped: the norm is 3 times max_norm", "发生裁剪：范数是 max_norm 的 3 倍",
         B=[2, 3, 1], T=6, V=8, E=5, ignored=[0.1, 0.6, 0.0], opt="SGD", clip=1 / 3, stale=False,
         ignore_index=-100, scale=1.0),
    edge("norm below max_norm: nothing is clipped", "范数低于 max_norm：不裁剪",
         B=[2, 1], T=7, V=6, E=5, ignored=[0.3, 0.0], opt="SGD", clip=2.0, stale=False,
         ignore_index=-100, scale=1.0),
    edge("a small gradient norm: the 1e-6 of max_norm / (norm + 1e-6) shows",
         "梯度范数很小：max_norm / (norm + 1e-6) 中的 1e-6 起作用",
         B=[2, 2], T=6, V=5, E=4, ignored=[0.0, 0.5], opt="SGD", clip=0.5, stale=False,
         ignore_index=-100, scale=1e-3),
    edge("stale grads: the model arrives with .grad set", "过期梯度：模型带着已有的 .grad 进来",
         B=[2, 2], T=5, V=6, E=4, ignored=[0.2, 0.4], opt="SGD+momentum", clip=None, stale=True,
         ignore_index=-100, scale=1.0),
    edge("ignore_index=0: a real class id, ignored", "ignore_index=0：一个真实的类别 id，被忽略",
         B=[2, 3], T=5, V=6, E=4, ignored=[0.4, 0.2], opt="SGD", clip=None, stale=False,
         ignore_index=0, scale=1.0),
    edge("AdamW with weight decay, clipped: the frozen and unused parameters stay put",
         "AdamW 带权重衰减并裁剪：冻结的和未使用的参数保持不动",
         B=[1, 3, 2], T=6, V=7, E=5, ignored=[0.0, 0.7, 0.3], opt="AdamW", clip=0.5, stale=False,
         ignore_index=-1, scale=1.0),
    edge("max_norm=inf: nothing is clipped, the norm is still returned", "max_norm=inf：不裁剪，仍返回范数",
         B=[3, 1], T=4, V=5, E=4, ignored=[0.5, 0.0], opt="SGD+momentum", clip="inf", stale=False,
         ignore_index=-100, scale=1.0),
    edge("a single micro-batch", "只有一个微批次",
         B=[4], T=6, V=7, E=5, ignored=[0.3], opt="SGD", clip=0.5, stale=False, ignore_index=-100, scale=1.0),
)
# fmt: on


def draws(rng, count: int) -> list[dict]:
    """1 to 4 micro-batches of 1 to 3 rows, T 2 to 8, V 4 to 12, every setting drawn."""
    cases = []
    for _ in range(count):
        micro = rng.randint(1, 4)
        cases.append(
            {
                "B": [rng.randint(1, 3) for _ in range(micro)],
                "T": rng.randint(2, 8),
                "V": rng.randint(4, 12),
                "E": rng.randint(3, 6),
                "ignored": [rng.choice((0.0, 0.2, 0.5, 0.9, 1.0)) for _ in range(micro)],
                "opt": rng.choice(("SGD", "SGD+momentum", "AdamW")),
                "clip": rng.choice((None, "inf", 0.3, 0.7, 2.0)),
                "stale": rng.random() < 0.3,
                "ignore_index": rng.choice((-100, -1, 0)),
                "scale": 1.0,
            }
        )
    return cases


CASES = CaseTable(draw=draws, edges=EDGES, draws=4)


def make_inputs(gen, case, dtype) -> dict:
    """{state, micro_batches, stale}: every parameter random (the gain near 1), targets with
    case["ignored"] of each micro-batch set to ignore_index, at least one valid token overall."""
    V, E, T = case["V"], case["E"], case["T"]

    def rand(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * std

    s = case["scale"]
    state = {
        "embed.weight": rand(V, E) * s,
        "gain": 1.0 + rand(E, std=0.3),
        "hidden.weight": rand(E, E, std=E**-0.5) * s,
        "hidden.bias": rand(E, std=0.3) * s,
        "head.weight": rand(V, E, std=1.5 * E**-0.5) * s,
        "unused": rand(3),
    }
    ignore = case["ignore_index"]
    micro_batches = []
    for rows, fraction in zip(case["B"], case["ignored"]):
        x = torch.randint(0, V, (rows, T), generator=gen)
        y = torch.randint(0, V, (rows, T), generator=gen)
        if ignore == 0:
            y = torch.randint(1, V, (rows, T), generator=gen)  # 0 is the ignored class: only where drawn
        drop = torch.rand(rows, T, generator=gen) < fraction if fraction < 1.0 else torch.ones(rows, T, dtype=torch.bool)
        micro_batches.append((x, y.masked_fill(drop, ignore)))
    if not any(bool((y != ignore).any()) for _, y in micro_batches):
        x, y = micro_batches[0]
        y[0, 0] = 1
    stale = {name: rand(*state[name].shape, std=0.5).to(dtype) for name in TRAINABLE} if case["stale"] else {}
    return {"state": {k: v.to(dtype) for k, v in state.items()}, "micro_batches": micro_batches, "stale": stale}


# --------------------------------------------------------------------------- the reference


def reference(state: dict, micro_batches: list, ignore_index: int) -> dict:
    """float64: one forward on the concatenated micro-batches, F.cross_entropy (mean over every
    valid token), backward: {model, loss, logit size}."""
    model = build({k: v.double() for k, v in state.items()})
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=ignore_index)
    loss.backward()
    return {"model": model, "loss": loss.detach(), "amplitude": max(1.0, float(logits.detach().abs().max()))}


def hyperparameters(case, largest_grad: float) -> tuple:
    """The optimizer's (class name, hyperparameters); AdamW's eps is 1% of the largest clipped
    grad, so its step still depends on the grads' size and float32 rounding stays far below it."""
    if case["opt"] == "SGD":
        return "SGD", {"lr": 0.5}
    if case["opt"] == "SGD+momentum":
        return "SGD", {"lr": 0.3, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}
    return "AdamW", {"lr": 0.05, "eps": 0.01 * largest_grad, "weight_decay": 0.1}


def expected(case, inputs) -> dict:
    """The reference step: loss, norm, the parameters after, the arguments of the call, and the
    sizes the tolerances need."""
    ref = reference(inputs["state"], inputs["micro_batches"], case["ignore_index"])
    model = ref["model"]
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf))  # the norm alone
    clip = case["clip"]
    max_norm = None if clip is None else math.inf if clip == "inf" else clip * norm
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    largest = max(float(p.grad.abs().max()) for p in model.parameters() if p.grad is not None)
    kind, hyper = hyperparameters(case, largest)
    OPTIMIZERS[kind](model.parameters(), **hyper).step()
    # how much a grad's error moves the step: lr for SGD (nesterov: (1 + momentum) lr), lr / eps for AdamW
    gain = hyper["lr"] * (1 + hyper.get("momentum", 0.0)) if kind == "SGD" else hyper["lr"] / hyper["eps"]
    return {
        "loss": ref["loss"],
        "norm": torch.tensor(norm, dtype=torch.float64),
        "params": {name: p.detach() for name, p in model.named_parameters()},
        "optimizer": (kind, hyper),
        "keywords": {"max_norm": max_norm, "ignore_index": case["ignore_index"]},
        "amplitude": ref["amplitude"],
        "step size": gain * largest,
    }


# --------------------------------------------------------------------------- tolerances

# From eps, of the model's dtype (`stored`) and of the dtype its arithmetic is judged as
# (`computed`: float32 for a float64 model in the core tier, FLOAT64_RULE):
#   loss:    rtol = ROUND * computed, atol = ROUND * computed * A  (A = max(1, max |logit|):
#            log-softmax rounds at the logits' scale);
#   norm:    rtol = ROUND * computed;
#   params:  rtol = STORE * stored (the parameter rounded once when written),
#            atol = STEP * computed * S, S = the step's size per unit of relative grad error:
#            lr * (1 + momentum) * max |grad| (SGD), lr * max |grad| / eps (AdamW).
# Measured over 100 seeds x every case, float32 and float64 (core and float64 rule), for the
# solution and the stub-only variant, worst error as a fraction of the allowed one: float32
# loss 0.058, norm 0.43 (the small-norm case), params 0.22; float64 judged as float32 (core)
# 0.072, 0.14, 0.18; float64 under the float64 rule 2.0e-9 at most.
ROUND = 16
STORE = 4
STEP = 32


def tolerances(dtype, facts: dict, *, float64_throughout=False) -> dict:
    computed = torch.finfo(core_dtype(dtype, float64_throughout)).eps
    stored = torch.finfo(dtype).eps
    return {
        "loss": {"rtol": ROUND * computed, "atol": ROUND * computed * facts["amplitude"]},
        "norm": {"rtol": ROUND * computed, "atol": 0.0},
        "params": {"rtol": STORE * stored, "atol": STEP * computed * facts["step size"]},
    }


# --------------------------------------------------------------------------- the check


def call_text(case, inputs, want) -> str:
    kind, hyper = want["optimizer"]
    shown = ", ".join(f"{k}={v:.3g}" for k, v in hyper.items())
    batches = ", ".join(f"({describe(x)}, {describe(y)})" for x, y in inputs["micro_batches"])
    dtype = str(inputs["state"]["head.weight"].dtype).removeprefix("torch.")
    max_norm = want["keywords"]["max_norm"]
    valid = "+".join(str(int((y != case["ignore_index"]).sum())) for _, y in inputs["micro_batches"])
    return (
        f"accumulate_and_step(TinyLM(V={case['V']}, E={case['E']}, {dtype}), {kind}({shown}), "
        f"[{batches}], max_norm={'None' if max_norm is None else f'{max_norm:.4g}'}, "
        f"ignore_index={case['ignore_index']}) # N={valid}"
    )


def number(value):
    """A Python number or a one-element tensor as float64 0-d; anything else as it came."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    if isinstance(value, Tensor) and value.numel() == 1 and value.is_floating_point():
        return value.detach().reshape(()).double().cpu()
    return value


def observed(got: dict) -> dict:
    """{what: value} of a scenario's trace: loss, total_norm, each parameter."""
    returned = got["returned"]
    pair = isinstance(returned, list) and len(returned) == 2
    found = {"returned": returned, "loss": number(returned[0]) if pair else None}
    found["total_norm"] = number(returned[1]) if pair else None
    return found | {f"model.{name}": value for name, value in got["params"].items()}


HINTS = {
    "loss": pick(
        "The loss is the whole batch's: the sum of every valid token's cross-entropy over all micro-batches, "
        "divided by N, the valid tokens of all of them (not the mean of each micro-batch's mean)",
        "loss 是整个批次的：所有微批次中每个有效 token 的交叉熵之和，除以 N，即全部微批次的有效 token 数"
        "（不是各微批次均值的平均）",
    ),
    "total_norm": pick(
        "total_norm = sqrt(sum of ||grad||**2 over the parameters with a grad), of the ACCUMULATED grads, before "
        "clipping",
        "total_norm = sqrt(对有梯度的参数求 ||grad||**2 之和)，针对【累积后】的梯度，在裁剪之前计算",
    ),
    "params": pick(
        "Each micro-batch backwards (its summed token losses) / N; then one global norm, every grad times "
        "min(1, max_norm / (norm + 1e-6)), one optimizer.step()",
        "每个微批次对 (其 token 损失之和) / N 做 backward；然后算一次全局范数，每个梯度乘以 "
        "min(1, max_norm / (norm + 1e-6))，再做一次 optimizer.step()",
    ),
}


def check_step(kata, case, dtype, gen, *, float64_throughout=False) -> None:
    """One scenario on the case's inputs, judged against the reference step: the pair returned,
    the loss, the norm, then every parameter after the step."""
    inputs = make_inputs(gen, case, dtype)
    want = expected(case, inputs)
    allowed = tolerances(dtype, want, float64_throughout=float64_throughout)
    text = call_text(case, inputs, want)
    arguments = (inputs["state"], want["optimizer"], inputs["micro_batches"], want["keywords"], inputs["stale"])

    def replay(implementation) -> dict:
        return observed(stepping(implementation, *arguments))

    sizes = {"K": len(case["B"])}
    with case.judged(), SPEC.diagnosing(replay, sizes):
        got = replay(kata)
        if got["loss"] is None:
            raise Mismatch(
                pick(
                    f"{text} returned {describe(got['returned'])}; expected (loss, total_norm), two Python floats",
                    f"{text} 返回了 {describe(got['returned'])}；应返回 (loss, total_norm)，两个 Python float",
                ),
                what="returned",
                actual=got["returned"],
                expected=None,
                kind_only=True,
            )
        for what, value in (("loss", want["loss"]), ("total_norm", want["norm"])):
            check_tensor_kind(got[what], value, call=text, what=what)
            assert_close(got[what], value, call=text, what=what, tolerance=allowed[what.replace("total_", "")],
                         hint=HINTS[what])  # fmt: skip
        for name in NAMES:
            what = f"model.{name}"
            reference_value = want["params"][name].to(dtype)
            assert_close(got[what], reference_value, call=text, what=what, tolerance=allowed["params"],
                         hint=HINTS["params"])  # fmt: skip


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: 4 micro-batches of [4, 32] tokens, a
    TinyLM of V 512 and E 64, SGD with momentum, max_norm 1.0, float32; the reference steps a
    copy of the model on the concatenated batch with clip_grad_norm_."""
    gen = torch.Generator().manual_seed(0)
    V, E = 512, 64
    state = {
        "embed.weight": torch.randn(V, E, generator=gen),
        "gain": torch.ones(E),
        "hidden.weight": torch.randn(E, E, generator=gen) / 8,
        "hidden.bias": torch.zeros(E),
        "head.weight": torch.randn(V, E, generator=gen) / 8,
        "unused": torch.zeros(3),
    }
    batches = [(torch.randint(0, V, (4, 32), generator=gen), torch.randint(0, V, (4, 32), generator=gen))
               for _ in range(4)]  # fmt: skip
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    model = build(state).to(device)
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])

    def kata_call():
        with torch.enable_grad():
            return kata.accumulate_and_step(model, optimizer, batches, max_norm=1.0)

    def reference_call():
        with torch.enable_grad():
            loss = F.cross_entropy(twin(x).reshape(-1, V), y.reshape(-1))
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
            twin_optimizer.step()
            twin_optimizer.zero_grad(set_to_none=True)
            return loss.item(), norm.item()

    return kata_call, reference_call


SPEC = KataSpec(
    kata="grad_accumulation",
    symbol="accumulate_and_step",
    reference=(
        "one float64 step on the micro-batches concatenated: F.cross_entropy (mean over all valid tokens), "
        "clip_grad_norm_, the same SGD or AdamW step"
    ),
    forbidden=GRAD_CLIPPING,
    tolerances=per_dtype(float64=(ROUND * 2.0**-52, ROUND * 2.0**-52), float32=(ROUND * 2.0**-23, ROUND * 2.0**-23)),
    tolerance_note=(
        "shown for the loss (its atol times max(1, max |logit|)); the norm: rtol alone; the parameters: rtol 4 eps "
        "of their dtype, atol 32 eps times the step's size per unit of grad error (lr max|grad|, or lr max|grad| / "
        "eps for AdamW); the solution and the variant measured at most 0.43 of these"
    ),
    cases=CASES,
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- the math


@core(zh="一步更新等于在整个批次上的一步（损失、范数、参数）")
@dtypes(*FULL)
def test_the_step_equals_one_step_on_the_whole_batch(kata, rng, gen, dtype):
    for case in CASES.cases(rng, edges=dtype == torch.float32):
        check_step(kata, case, dtype, gen)


# --------------------------------------------------------------------------- conventions


@convention(
    "no valid token in any micro-batch (N == 0) raises ValueError.", zh="没有任何有效 token（N == 0）时抛出 ValueError"
)
def test_no_valid_token_raises_value_error(kata, rng, gen):
    case = CASES.random(rng)[0]
    inputs = make_inputs(gen, case, torch.float32)
    ignore = case["ignore_index"]
    empty = [(x, torch.full_like(y, ignore)) for x, y in inputs["micro_batches"]]
    for batches, shown in ((empty, f"y == {ignore}"), ([], "micro_batches=[]")):

        def replay(implementation, batches=batches) -> dict:
            return {"outcome": raising(implementation, inputs["state"], batches, {"ignore_index": ignore})}

        with SPEC.diagnosing(replay):
            outcome = replay(kata)["outcome"]
            if outcome != "raised ValueError":
                raise Mismatch(
                    pick(
                        f"accumulate_and_step(..., {shown}) {outcome.replace('returned', 'returned normally')}; "
                        "expected ValueError: with no valid token the mean loss is 0 / 0",
                        f"accumulate_and_step(..., {shown}) {outcome.replace('returned', '正常返回')}；"
                        "应抛出 ValueError：没有有效 token 时平均损失是 0 / 0",
                    ),
                    what="outcome",
                    actual=outcome,
                    expected="raised ValueError",
                    kind_only=True,
                )


def trace_inputs(gen, case, *, stale_everywhere=False) -> tuple:
    inputs = make_inputs(gen, case, torch.float32)
    if stale_everywhere:
        inputs["stale"] = {n: torch.randn(v.shape, generator=gen) for n, v in inputs["state"].items()}
    want = expected(case, inputs)
    arguments = (inputs["state"], want["optimizer"], inputs["micro_batches"], want["keywords"], inputs["stale"])
    return inputs, arguments


@convention("returns Python floats, not tensors (loss.item()).", zh="返回 Python float 而不是张量")
def test_it_returns_python_floats(kata, rng, gen):
    _, arguments = trace_inputs(gen, CASES.random(rng)[0])

    def replay(implementation) -> dict:
        return {"kinds": stepping(implementation, *arguments)["kinds"]}

    with SPEC.diagnosing(replay):
        kinds = replay(kata)["kinds"]
        if kinds != ["float", "float"]:
            raise Mismatch(
                pick(
                    f"accumulate_and_step returned ({', '.join(kinds)}); expected (float, float): "
                    "loss.item() and total_norm.item()",
                    f"accumulate_and_step 返回了 ({', '.join(kinds)})；应返回 (float, float)："
                    "loss.item() 与 total_norm.item()",
                ),
                what="kinds",
                actual=kinds,
                expected=["float", "float"],
                kind_only=True,
            )


STEPPED = pick(
    "optimizer.zero_grad(set_to_none=True): a zeroed grad is still stepped (weight decay, momentum)",
    "optimizer.zero_grad(set_to_none=True)：清零的梯度仍会被更新（权重衰减、动量）",
)


@convention(
    "gradients are set to None, never zeroed: a parameter that gets no gradient (frozen, unused) is never "
    "stepped, and every .grad is None on return.",
    zh="梯度置为 None 而不是清零：没有梯度的参数（冻结的、未使用的）不被更新，返回时每个 .grad 都是 None",
)
def test_grads_are_set_to_none_before_and_after(kata, rng, gen):
    """Stale grads on every parameter, the frozen and the unused ones included, under AdamW and
    SGD with weight decay: those two must not move, and no .grad is left."""
    for opt in ("AdamW", "SGD+momentum"):
        case = EDGES[0] | {"opt": opt, "clip": 0.5}
        inputs, arguments = trace_inputs(gen, case, stale_everywhere=True)

        def replay(implementation, arguments=arguments) -> dict:
            got = stepping(implementation, *arguments)
            return {f"model.{n}": got["params"][n] for n in ("gain", "unused")} | {"grads left": got["grads left"]}

        with case.judged(), SPEC.diagnosing(replay):
            got = replay(kata)
            for name in ("gain", "unused"):
                assert_close(got[f"model.{name}"], inputs["state"][name], call=f"accumulate_and_step(model, {opt}(...), ...)",
                             what=f"model.{name}", tolerance={"rtol": 0.0, "atol": 0.0}, hint=STEPPED)  # fmt: skip
            if got["grads left"]:
                raise Mismatch(
                    pick(
                        f"after accumulate_and_step, .grad is not None on {got['grads left']}; end with "
                        "optimizer.zero_grad(set_to_none=True)",
                        f"accumulate_and_step 之后，{got['grads left']} 的 .grad 不是 None；最后应调用 "
                        "optimizer.zero_grad(set_to_none=True)",
                    ),
                    what="grads left",
                    actual=got["grads left"],
                    expected=[],
                    kind_only=True,
                )


@convention(FLOAT64_RULE, zh="float64 输入全程以 float64 计算")
def test_float64_inputs_are_computed_in_float64_throughout(kata, rng, gen):
    """The loss, the norm and the step of a float64 model, held to float64's own tolerances."""
    for case in (EDGES[2], EDGES[7], *CASES.random(rng, 2)):
        check_step(kata, case, torch.float64, gen, float64_throughout=True)


@convention("the micro-batches are never changed in place.", zh="不原地修改微批次")
def test_the_micro_batches_are_left_alone(kata, rng, gen):
    inputs, arguments = trace_inputs(gen, EDGES[6])  # ignore_index=0: a file that masks the targets in place shows it
    got = stepping(kata, *arguments)
    for (x, y), (x_after, y_after) in zip(inputs["micro_batches"], got["micro_batches"]):
        for name, before, after in (("x", x, x_after), ("y", y, y_after)):
            if not torch.equal(before, after):
                raise AssertionError(
                    pick(
                        f"accumulate_and_step changed a micro-batch's {name} in place; leave the inputs alone",
                        f"accumulate_and_step 原地修改了某个微批次的 {name}；不要修改输入",
                    )
                )

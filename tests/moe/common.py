"""moe: what its tests share: the SPEC, the case tables, the references, the tolerances, the
scenarios and the checks.

PyTorch has no mixture-of-experts module, so the layer's reference (`Reference` below) is a
small float64 nn.Module whose parameters carry the kata's names, so they map one to one
(router.weight, experts.{e}.gate_proj.weight, ...): nn.Linear for the router and the SwiGLU
experts, F.silu, F.softmax over the experts, torch.topk, the k probabilities renormalised, and
EVERY expert run on EVERY token, its output weighted by the token's routing weight for it and
summed over the experts the token chose. Every parameter is random
(judge.testing.modules.randomise_). That the learner's layer is sparse is judged on its own
(test_sparsity.py).

Routing is a discontinuous choice, so the inputs never let rounding decide it: the router
logits the reference computes (in float64, from the weights and inputs rounded to the dtype
under test) have their top_k + 1 largest values per token at least MARGINS[dtype] apart,
tokens being redrawn until they do. The softmax may be computed in float32 whatever the
input's dtype in the core tier (as Mixtral does): float64 results are judged there with
float32's tolerances (the float64 rule, spec.FLOAT64_RULE), with float64's own in its
convention test.

load_balancing_loss is judged against Hugging Face's load_balancing_loss_func (one layer, no
attention mask), rewritten here: tokens_per_expert = mean over tokens of
one_hot(selected_experts) [top_k, E], router_prob_per_expert = mean probabilities [E],
loss = sum(tokens_per_expert * router_prob_per_expert[None]) * num_experts; values and the
gradient autograd takes through it to router_logits (through P only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import NONE
from judge.language import pick
from judge.testing import modules
from judge.testing.checks import Mismatch, assert_close, describe
from judge.testing.functions import FunctionKata
from judge.testing.inputs import randn
from judge.testing.modules import ModuleKata
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, core_dtype, edge
from judge.testing.tolerances import per_dtype

FULL = [torch.float64, torch.float32]  # float64 first: the edge cases run in it, and show first
HALF = [torch.float16, torch.bfloat16]

# (rtol, atol) for y and router_logits against the dense float64 reference rounded to the
# dtype under test. Measured over 40 seeds x (the 7 edge cases + 3 random draws) on the
# solution and the variants, the worst |error| / (atol + rtol |expected|):
#   float64 in the core tier (float32's tolerance): 0.04 with the routing softmax in float32
#            (as Mixtral; 2.9e-7 absolute); computed in float64 throughout, at most 8.4e-6 of
#            float64's own tolerance (30 seeds, the solution and every variant); every slip in
#            tests/mutants is off by more than 1e-2;
#   float32: y 0.12 (3.3e-6 absolute on a large y), router_logits 0.055;
#   float16: 0.17 (3.9e-3 absolute), bfloat16 0.24 (0.042 absolute: the weights rounded to
#            bfloat16 after a float32 softmax).
TOLERANCES = per_dtype(float64=(1e-10, 1e-10), float32=(5e-6, 5e-6), float16=(2e-2, 2e-2), bfloat16=(1.5e-1, 1.5e-1))
# Gradients in float64 (of x and every parameter, autograd through the learner's layer
# against autograd through the reference): float32 routing measured at most 0.10 of the
# first (1.05e-6 absolute: the backward of a float32 softmax rounds its incoming gradient),
# float64 routing 1e-10 of it; a detached routing weight is off by more than 0.1. The second,
# float64's own, judges the float64 rule: float64 throughout measured at most 4.4e-5 of it.
GRADIENT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
GRADIENT_TOLERANCE_FLOAT64 = {"rtol": 1e-10, "atol": 1e-10}
# load_balancing_loss (about top_k in size): float64 with float32 routing measured at most
# 0.035 of float32's (9.3e-7 absolute), float32 0.035; float64 throughout at most 3e-6 of its
# own; float16 and bfloat16: the float32 result rounded once to the half dtype, every
# implementation measured exact (two ulps allowed).
LOSS_TOLERANCES = per_dtype(
    float64=(1e-10, 1e-10),
    float32=(5e-6, 5e-6),
    float16=(2 * torch.finfo(torch.float16).eps, 1e-5),
    bfloat16=(2 * torch.finfo(torch.bfloat16).eps, 1e-5),
)
# Its gradient (float64): float32 routing measured at most 0.21 of the first (3.5e-7 absolute);
# float64 throughout at most 1.3e-6 of the second.
LOSS_GRADIENT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
LOSS_GRADIENT_TOLERANCE_FLOAT64 = {"rtol": 1e-10, "atol": 1e-10}
TOLERANCE_NOTE = (
    "the routing softmax may be float32 for every dtype in the core tier (as Mixtral), where float64 results get "
    "float32's tolerance: the solution and variants measured at most 0.12 of these in float32, 0.24 in half "
    "precision; each token's top_k + 1 largest router logits are drawn apart, so rounding never changes which "
    "experts are chosen"
)
# How far apart (in logits) the top_k + 1 largest router logits of every token are drawn:
# above what rounding the logits to the dtype under test can move them (bfloat16's ulp at 4
# is 0.016), so every correct implementation chooses the same experts as the reference.
MARGINS = {torch.float64: 1e-3, torch.float32: 1e-3, torch.float16: 0.02, torch.bfloat16: 0.1}
ASKS = pick(
    "router (nn.Linear(d_model, num_experts, bias=False)) and experts, an nn.ModuleList of num_experts "
    "distinct experts, each with gate_proj, up_proj (nn.Linear(d_model, d_ff, bias=False)) and down_proj "
    "(nn.Linear(d_ff, d_model, bias=False))",
    "router（nn.Linear(d_model, num_experts, bias=False)）和 experts：由 num_experts 个互不相同的专家组成的 "
    "nn.ModuleList，每个专家有 gate_proj、up_proj（nn.Linear(d_model, d_ff, bias=False)）和 down_proj"
    "（nn.Linear(d_ff, d_model, bias=False)）",
)
NAN_HINT = pick(
    "NaN where the reference has a number usually comes from an expert run on tokens NOT routed to it: its output "
    "there may overflow to inf, and masking it by a routing weight of 0 gives inf * 0 = NaN. Run each expert only "
    "on the tokens routed to it",
    "参考解是数值而这里是 NaN，通常是因为某个专家在没有路由给它的 token 上运行了：它在那里的输出可能溢出为 inf，"
    "再用为 0 的路由权重去屏蔽就得到 inf * 0 = NaN。每个专家只应在路由给它的 token 上运行",
)

# --------------------------------------------------------------------------- the reference


class ReferenceExpert(nn.Module):
    """SwiGLU from PyTorch's own parts: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, C: int, d_ff: int, dtype=torch.float64):
        super().__init__()
        self.gate_proj = nn.Linear(C, d_ff, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(C, d_ff, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(d_ff, C, bias=False, dtype=dtype)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Reference(nn.Module):
    """The mixture, dense: every expert on every token, each output weighted by the token's
    routing weight for that expert and summed over the experts the token chose (the others'
    outputs are never added, so one that overflows where it was not chosen changes nothing)."""

    def __init__(self, C: int, d_ff: int, E: int, k: int, dtype=torch.float64):
        super().__init__()
        self.k = k
        self.router = nn.Linear(C, E, bias=False, dtype=dtype)
        self.experts = nn.ModuleList([ReferenceExpert(C, d_ff, dtype) for _ in range(E)])

    def routing(self, router_logits):
        """([N, E] the renormalised top-k probabilities, 0 for the experts not chosen; [N, E]
        True where the token chose the expert)."""
        probs = F.softmax(router_logits, dim=-1)
        top, chosen = torch.topk(probs, self.k, dim=-1)
        weights = torch.zeros_like(probs).scatter(1, chosen, top / top.sum(-1, keepdim=True))
        return weights, torch.zeros_like(probs, dtype=torch.bool).scatter(1, chosen, True)

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])  # (N, C): token b * T + t
        router_logits = self.router(tokens)  # (N, E)
        every = torch.stack([expert(tokens) for expert in self.experts], dim=1)  # (N, E, C)
        weights, chosen = self.routing(router_logits)
        y = torch.where(chosen[..., None], weights[..., None] * every, 0.0).sum(1)  # (N, C)
        return y.view_as(x), router_logits


def chosen_counts(router_logits: torch.Tensor, k: int) -> torch.Tensor:
    """int64 [E]: how many tokens chose each expert (in any of their top_k slots)."""
    E = router_logits.shape[-1]
    return torch.bincount(router_logits.topk(k, dim=-1).indices.flatten(), minlength=E)


def separated(logits: torch.Tensor, k: int, margin: float) -> torch.Tensor:
    """bool [N]: the top_k + 1 largest logits of each row are at least `margin` apart."""
    m = min(k + 1, logits.shape[-1])
    if m < 2:
        return torch.ones(logits.shape[0], dtype=torch.bool)
    top = logits.topk(m, dim=-1).values
    return (top[:, :-1] - top[:, 1:]).amin(-1) > margin


def draw_separated(gen, N: int, C: int, k: int, dtype, logits_of, std: float = 1.0) -> torch.Tensor:
    """[N, C] float64 rows, each rounded to `dtype`, redrawn until logits_of(rows) [N, E] are
    separated (see MARGINS): no near-tie ever decides which experts are chosen."""
    rows = randn(gen, N, C, std=std, dtype=torch.float64).to(dtype).double()
    for _ in range(200):
        bad = ~separated(logits_of(rows), k, MARGINS[dtype])
        if not bad.any():
            return rows
        rows[bad] = randn(gen, int(bad.sum()), C, std=std, dtype=torch.float64).to(dtype).double()
    # never seen: even 8 experts, top 7 in bfloat16 (the worst) rejects 82% of rows per round: 0.82^200 ~ 1e-17
    raise RuntimeError("could not draw router logits without near-ties")


# --------------------------------------------------------------------------- the module kata


def outputs(result, call, kwargs) -> dict:
    """The learner's (y, router_logits), router_logits first: the routing is upstream of y."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise AssertionError(
            pick(
                f"{call} returned {describe(result)}; expected a pair (y [B, T, C], router_logits [B*T, num_experts])",
                f"{call} 返回了 {describe(result)}；应返回一对 (y [B, T, C], router_logits [B*T, num_experts])",
            )
        )
    return {"router_logits": result[1], "y": result[0]}


def reference_forward(reference, inputs, kwargs):
    y, router_logits = reference(inputs["x"])
    return {"router_logits": router_logits.detach(), "y": y.detach()}, None  # every row is defined


MOE = ModuleKata(
    kata="moe",
    cls="MoELayer",
    asks=ASKS,
    inputs=("x",),
    reference=lambda case, options: Reference(case["C"], case["F"], case["E"], case["k"]),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=lambda case, options: (
        {"d_model": case["C"], "d_ff": case["F"], "num_experts": case["E"]},
        {} if options.get("default_top_k") else {"top_k": case["k"]},
    ),
    forward=reference_forward,
    outputs=outputs,
    tolerances=TOLERANCES,
    nan_hint=NAN_HINT,
)

# --------------------------------------------------------------------------- the case table
# B batch, T length, C = d_model, F = d_ff, E = num_experts, k = top_k.

# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("top 2 of 5 experts, odd sizes", "5 个专家中选前 2 个，奇数尺寸",
         B=2, T=7, C=6, F=11, E=5, k=2),
    edge("top_k 1: the one chosen expert gets weight 1", "top_k 为 1：唯一选中的专家权重为 1",
         B=3, T=4, C=5, F=9, E=4, k=1),
    edge("3 of 8 experts per token", "每个 token 从 8 个专家中选 3 个",
         B=3, T=9, C=10, F=13, E=8, k=3),
    edge("top_k = num_experts: every token goes to every expert", "top_k = num_experts：每个 token 都送到每个专家",
         B=2, T=3, C=4, F=7, E=3, k=3),
    edge("2 tokens, 7 experts: at least 3 experts get no token", "2 个 token，7 个专家：至少 3 个专家分不到 token",
         B=1, T=2, C=5, F=9, E=7, k=2),
    edge("one token", "一个 token",
         B=1, T=1, C=8, F=5, E=4, k=2),
    edge("one expert", "一个专家",
         B=2, T=5, C=3, F=6, E=1, k=1),
)
# fmt: on


def hidden_sizes(rng, count: int) -> list[dict]:
    """B, T, C and F all differ; E from 2 to 8, top_k 2 in the first draw (Mixtral's), any
    from 1 to E in the others."""
    cases = []
    for index in range(count):
        E = rng.randint(2, 8)
        k = 2 if index == 0 else rng.randint(1, E)
        B, T, C = rng.sample(range(2, 12), 3)
        F_ = rng.choice([n for n in range(3, 3 * C + 8, 2) if n not in (B, T, C)])
        cases.append({"B": B, "T": T, "C": C, "F": F_, "E": E, "k": k})
    return cases


CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)


def build(gen, case, dtype=torch.float32, device="cpu", **options) -> modules.Built:
    return modules.build(MOE, gen, case, options, dtype, device)


def inputs(gen, built, case, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """x [B, T, C], its tokens redrawn until the reference's router logits have no near-ties."""
    router = built.reference.router.weight.detach()  # float64, rounded to dtype like the learner's
    rows = draw_separated(gen, case["B"] * case["T"], case["C"], case["k"], dtype, lambda t: t @ router.T)
    return rows.view(case["B"], case["T"], case["C"]).to(dtype=dtype, device=device)


@scenario
def shared_experts(kata, recipe: dict) -> list:
    """[[i, j], ...]: the slots i < j of the learner's experts that hold the same module."""
    try:
        experts = list(kata.MoELayer(*recipe["positional"], **recipe["keywords"]).experts)
    except Exception:  # noqa: BLE001 - only a hint: the message stays as it is
        return []
    return [[i, j] for j in range(len(experts)) for i in range(j) if experts[i] is experts[j]]


def with_shared_hint(kata, built: modules.Built, error: AssertionError) -> None:
    """When the learner's parameters do not match because its experts are one module listed
    several times, say so (in place: the diagnosis stays)."""
    if isinstance(error, Mismatch):
        return
    shared = shared_experts(kata, built.recipe)
    if shared:
        i, j = shared[0]
        error.args = (
            pick(
                f"{error}; experts[{i}] and experts[{j}] are the same module: nn.ModuleList([Expert(...)] * n) "
                "repeats ONE expert n times; build a new Expert for each of the num_experts slots",
                f"{error}；experts[{i}] 和 experts[{j}] 是同一个模块：nn.ModuleList([Expert(...)] * n) "
                "把同一个专家重复了 n 次；应为 num_experts 个位置各新建一个 Expert",
            ),
        )


def check(kata, built: modules.Built, x: torch.Tensor, *, float64_throughout: bool = False) -> None:
    """modules.check (y and router_logits), a parameter problem explained when experts are shared."""
    try:
        modules.check(MOE, kata, built, {"x": x}, float64_throughout=float64_throughout)
    except AssertionError as error:
        with_shared_hint(kata, built, error)
        raise


# --------------------------------------------------------------------------- load_balancing_loss
# N tokens, E = num_experts, k = top_k.

# fmt: off
LOSS_EDGES = (
    edge("13 tokens, top 2 of 5 experts", "13 个 token，5 个专家中选前 2 个",
         N=13, E=5, k=2),
    edge("3 of 8 experts per token", "每个 token 从 8 个专家中选 3 个",
         N=11, E=8, k=3),
    edge("top_k 1", "top_k 为 1",
         N=9, E=6, k=1),
    edge("top_k = num_experts: every expert chosen by every token, the loss is num_experts",
         "top_k = num_experts：每个专家都被每个 token 选中，损失等于 num_experts",
         N=6, E=4, k=4),
    edge("2 tokens, 7 experts: at least 3 experts chosen by none",
         "2 个 token，7 个专家：至少 3 个专家没被任何 token 选中",
         N=2, E=7, k=2),
    edge("one token", "一个 token",
         N=1, E=4, k=2),
    edge("one expert: the loss is 1", "一个专家：损失为 1",
         N=5, E=1, k=1),
)
# fmt: on


def loss_sizes(rng, count: int) -> list[dict]:
    cases = []
    for index in range(count):
        E = rng.randint(2, 9)
        cases.append({"N": rng.randint(2, 40), "E": E, "k": 2 if index == 0 else rng.randint(1, E)})
    return cases


LOSS_CASES = CaseTable(draw=loss_sizes, edges=LOSS_EDGES, draws=3)
LOSS_SYMBOL = "load_balancing_loss"  # called through LOSS, declared with the SPEC below


def hf_load_balancing_loss(router_logits: torch.Tensor, num_experts: int, top_k: int) -> torch.Tensor:
    """Hugging Face's load_balancing_loss_func (Mixtral), one layer, no attention mask, float64."""
    routing_weights = F.softmax(router_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)  # (N, k, E)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)  # (k, E)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)  # (E,)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def make_logits(gen, case, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """router_logits [N, E] of std 1.5, rows redrawn until their top_k + 1 largest are apart."""
    logits = draw_separated(gen, case["N"], case["E"], case["k"], dtype, lambda t: t, std=1.5)
    return logits.to(dtype=dtype, device=device)


def expected_loss(router_logits: torch.Tensor, E: int, k: int) -> torch.Tensor:
    want = hf_load_balancing_loss(router_logits.detach().cpu().double(), E, k)
    return want.to(dtype=router_logits.dtype, device=router_logits.device)


def check_loss(kata, case, router_logits, *, float64_throughout: bool = False) -> None:
    E, k = case["E"], case["k"]
    tolerance = LOSS_TOLERANCES[core_dtype(router_logits.dtype, float64_throughout)]
    want = expected_loss(router_logits, E, k)
    with LOSS.judging(kata, router_logits, E, k, symbol=LOSS_SYMBOL, sizes=case) as call:
        assert_close(call["loss"], want, call=call.text, what="loss", tolerance=tolerance)


def check_loss_gradient(kata, case, router_logits, upstream: float, *, float64_throughout: bool = False) -> None:
    """Autograd through the loss in float64 against autograd through Hugging Face's formula."""
    E, k = case["E"], case["k"]
    twin = router_logits.clone().requires_grad_()
    (hf_load_balancing_loss(twin, E, k) * upstream).backward()
    tolerance = LOSS_GRADIENT_TOLERANCE_FLOAT64 if float64_throughout else LOSS_GRADIENT_TOLERANCE
    upstream = torch.tensor(upstream, dtype=torch.float64)
    text = f"{LOSS_SYMBOL}({describe(router_logits)}, {E}, {k}).backward"
    with LOSS.judging_gradients(kata, router_logits, E, k, wrt=(0,), upstream=upstream, symbol=LOSS_SYMBOL) as got:
        what = "the gradient of `router_logits`"
        assert_close(got[what], twin.grad, call=text, what=what, tolerance=tolerance)


# --------------------------------------------------------------------------- the benchmark


class FastReference(Reference):
    """Hugging Face's MixtralSparseMoeBlock.forward, as PyTorch users write it: float32 routing,
    each expert on its own tokens (torch.where on a one-hot mask), index_add_ back."""

    def forward(self, x):
        B, T, C = x.shape
        hidden = x.view(-1, C)
        router_logits = self.router(hidden)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden.dtype)
        final = torch.zeros_like(hidden)
        expert_mask = F.one_hot(selected_experts, num_classes=len(self.experts)).permute(2, 1, 0)
        for e in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist():
            idx, top_x = torch.where(expert_mask[e])
            current = self.experts[e](hidden[top_x]) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(hidden.dtype))
        return final.view(B, T, C), router_logits


def benchmark(kata, device):
    """(kata call, reference call, None, the reference side's notes): x [8, 128, 512], 8 experts
    of d_ff 1024, top 2, in float32, eval() mode. PyTorch has no MoE: the reference is Hugging
    Face's MixtralSparseMoeBlock forward rewritten in the test (the same float32 weights); the
    notes time the dense formula the tests judge against (every expert on every token), what a
    sparse layer saves."""
    B, T, C, d_ff, E, k = 8, 128, 512, 1024, 8, 2
    reference = FastReference(C, d_ff, E, k, dtype=torch.float32).to(device).eval()
    dense = Reference(C, d_ff, E, k, dtype=torch.float32).to(device).eval()
    dense.load_state_dict(reference.state_dict())
    module = kata.MoELayer(C, d_ff, E, k)
    modules.load_state(module, dict(reference.named_parameters()))
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, C, device=device)

    def notes() -> dict:
        from torch.utils import benchmark as torch_benchmark

        from judge.timing import MIN_RUN_TIME, format_seconds

        with torch.no_grad():
            dense(x)
            if device == "cuda":
                torch.cuda.synchronize()
            timer = torch_benchmark.Timer("fn(x)", globals={"fn": dense, "x": x}, num_threads=torch.get_num_threads())
            return {
                "dense (every expert on every token)": format_seconds(
                    timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median
                )
            }

    return (lambda: module(x)), (lambda: reference(x)), None, notes  # the notes time no kata


SPEC = KataSpec(
    kata="moe",
    symbol="MoELayer",
    reference=(
        "a dense float64 mixture from nn.Linear, F.silu, F.softmax and torch.topk (every expert on every "
        "token, masked); Hugging Face's load_balancing_loss_func for the loss"
    ),
    forbidden=NONE,
    tolerances=TOLERANCES,
    tolerance_note=TOLERANCE_NOTE,
    cases=CASES,
    benchmark=benchmark,
    also={"load_balancing_loss": NONE},
)
LOSS = FunctionKata(
    SPEC,
    outputs={LOSS_SYMBOL: "loss"},
    parameters={LOSS_SYMBOL: ("router_logits", "num_experts", "top_k")},
)

"""moe: judged against a DENSE float64 mixture written here from PyTorch's own parts.

PyTorch has no mixture-of-experts module, so the reference (`Reference` below) is a small
float64 nn.Module whose parameters carry the kata's names, so they map one to one
(router.weight, experts.{e}.gate_proj.weight, ...): nn.Linear for the router and the
SwiGLU experts, F.silu, F.softmax over the experts, torch.topk, the k probabilities
renormalised, and EVERY expert run on EVERY token, its output multiplied by the token's
routing weight for it (0 where the expert was not chosen) and summed. Every parameter is
random (judge.testing.modules.randomise_). That the learner's layer is sparse is judged on
its own: forward hooks on the learner's experts[e] count the rows each expert module
receives, which must be exactly the tokens that chose it (top_k per token, N * top_k in
all); an expert that no token chose may be skipped or called on 0 rows (both count 0).

Routing is a discontinuous choice, so the inputs never let rounding decide it: the router
logits the reference computes (in float64, from the weights and inputs rounded to the dtype
under test) have their top_k + 1 largest values per token at least MARGINS[dtype] apart,
tokens being redrawn until they do. The softmax may be computed in float32 whatever the
input's dtype (as Mixtral does): the float64 tolerances accept float32 rounding in the
routing weights.

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
from judge.testing import modules_mirrored as modules
from judge.testing.checks import (
    Inconclusive,
    Mismatch,
    assert_close,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.inputs import randn
from judge.testing.modules_mirrored import ModuleKata
from judge.testing.spec import Case, CaseTable, KataSpec, dtypes, edge

FULL = [torch.float64, torch.float32]  # float64 first: the edge cases run in it, and show first
HALF = [torch.float16, torch.bfloat16]

# (rtol, atol) for y and router_logits against the dense float64 reference rounded to the
# dtype under test. Measured over 40 seeds x (the 7 edge cases + 3 random draws) on the
# solution and the three variants (one routes in float32 whatever the dtype, as Mixtral), the
# worst |error| / (atol + rtol |expected|):
#   float64: 0.17 (2.9e-7 absolute), all of it from float32 routing weights (float64 routing:
#            8.9e-16); every slip in tests/mutants is off by more than 1e-2;
#   float32: y 0.12 (3.3e-6 absolute on a large y), router_logits 0.055;
#   float16: 0.17 (3.9e-3 absolute), bfloat16 0.24 (0.042 absolute: the weights rounded to
#            bfloat16 after a float32 softmax).
TOLERANCES = {
    torch.float64: {"rtol": 1e-6, "atol": 1e-6},
    torch.float32: {"rtol": 5e-6, "atol": 5e-6},
    torch.float16: {"rtol": 2e-2, "atol": 2e-2},
    torch.bfloat16: {"rtol": 1.5e-1, "atol": 1.5e-1},
}
# Gradients in float64 (of x and every parameter, autograd through the learner's layer
# against autograd through the reference): float32 routing measured at most 0.10 of this
# (1.05e-6 absolute: the backward of a float32 softmax rounds its incoming gradient);
# float64 routing 1e-10 of it. A detached routing weight is off by more than 0.1.
GRADIENT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
# load_balancing_loss (about top_k in size): float64 with float32 routing measured at most
# 0.17 of it (9.3e-7 absolute), float32 0.035; float16 and bfloat16: the float32 result
# rounded once to the half dtype, every implementation measured exact (two ulps allowed).
LOSS_TOLERANCES = {
    torch.float64: {"rtol": 1e-6, "atol": 1e-6},
    torch.float32: {"rtol": 5e-6, "atol": 5e-6},
    torch.float16: {"rtol": 2 * torch.finfo(torch.float16).eps, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2 * torch.finfo(torch.bfloat16).eps, "atol": 1e-5},
}
# Its gradient (float64): float32 routing measured at most 0.21 of this (3.5e-7 absolute).
LOSS_GRADIENT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
TOLERANCE_NOTE = (
    "the routing softmax may be float32 for every dtype (as Mixtral), so float64 allows its rounding: "
    "the solution and variants measured at most 0.17 of these in float64, 0.12 in float32, 0.24 in half "
    "precision; each token's top_k + 1 largest router logits are drawn apart, so rounding never changes "
    "which experts are chosen"
)
# How far apart (in logits) the top_k + 1 largest router logits of every token are drawn:
# above what rounding the logits to the dtype under test can move them (bfloat16's ulp at 4
# is 0.016), so every correct implementation chooses the same experts as the reference.
MARGINS = {torch.float64: 1e-3, torch.float32: 1e-3, torch.float16: 0.02, torch.bfloat16: 0.1}
ASKS = (
    "router (nn.Linear(d_model, num_experts, bias=False)) and experts, an nn.ModuleList of num_experts "
    "distinct experts, each with gate_proj, up_proj (nn.Linear(d_model, d_ff, bias=False)) and down_proj "
    "(nn.Linear(d_ff, d_model, bias=False))"
)
ROUTING_ON_META = (
    'device handling not checked without a GPU: which tokens go to which expert is data, and the "meta" device has none'
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
    """The mixture, dense: every expert on every token, weighted by a [N, E] routing matrix
    that is 0 where the token did not choose the expert."""

    def __init__(self, C: int, d_ff: int, E: int, k: int, dtype=torch.float64):
        super().__init__()
        self.k = k
        self.router = nn.Linear(C, E, bias=False, dtype=dtype)
        self.experts = nn.ModuleList([ReferenceExpert(C, d_ff, dtype) for _ in range(E)])

    def routing(self, router_logits):
        """[N, E]: the renormalised top-k probabilities, 0 for the experts not chosen."""
        probs = F.softmax(router_logits, dim=-1)
        top, chosen = torch.topk(probs, self.k, dim=-1)
        return torch.zeros_like(probs).scatter(1, chosen, top / top.sum(-1, keepdim=True))

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])  # (N, C): token b * T + t
        router_logits = self.router(tokens)  # (N, E)
        every = torch.stack([expert(tokens) for expert in self.experts], dim=1)  # (N, E, C)
        y = (self.routing(router_logits)[..., None] * every).sum(1)  # (N, C)
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
            f"{call} returned {describe(result)}; expected a pair (y [B, T, C], router_logits [B*T, num_experts])"
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
    shapes=lambda case, inputs, kwargs: {
        "router_logits": (case["B"] * case["T"], case["E"]),
        "y": inputs["x"].shape,
    },
    tolerances=TOLERANCES,
)

# --------------------------------------------------------------------------- the case table
# B batch, T length, C = d_model, F = d_ff, E = num_experts, k = top_k.

EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("top 2 of 5 experts, odd sizes", B=2, T=7, C=6, F=11, E=5, k=2),
    edge("top_k 1: the one chosen expert gets weight 1", B=3, T=4, C=5, F=9, E=4, k=1),
    edge("3 of 8 experts per token", B=3, T=9, C=10, F=13, E=8, k=3),
    edge("top_k = num_experts: every token goes to every expert", B=2, T=3, C=4, F=7, E=3, k=3),
    edge("2 tokens, 7 experts: at least 3 experts get no token", B=1, T=2, C=5, F=9, E=7, k=2),
    edge("one token", B=1, T=1, C=8, F=5, E=4, k=2),
    edge("one expert", B=2, T=5, C=3, F=6, E=1, k=1),
)


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


def build(kata, gen, case, dtype=torch.float32, device="cpu", **options):
    try:
        return modules.build(MOE, kata, gen, case, options, dtype, device)
    except AssertionError as error:  # a parameter missing: say why when experts are shared
        shared = shared_experts(kata, case)
        if shared:
            error.args = (f"{error}; {shared}",)  # in place: its diagnosis stays
        raise


def shared_experts(kata, case) -> str:
    """What is wrong when the learner's experts are one module listed several times, else ""."""
    try:
        with torch.device("meta"):
            experts = list(getattr(kata.MoELayer(case["C"], case["F"], case["E"], top_k=case["k"]), "experts"))
    except Exception:  # noqa: BLE001 - only a hint: the message stays as it is
        return ""
    for e, expert in enumerate(experts):
        for other in range(e):
            if experts[other] is expert:
                return (
                    f"experts[{other}] and experts[{e}] are the same module: nn.ModuleList([Expert(...)] * n) "
                    "repeats ONE expert n times; build a new Expert for each of the num_experts slots"
                )
    return ""


def inputs(gen, built, case, dtype=torch.float32, device="cpu") -> dict:
    """x [B, T, C], its tokens redrawn until the reference's router logits have no near-ties."""
    router = built.reference.router.weight.detach()  # float64, rounded to dtype like the learner's
    rows = draw_separated(gen, case["B"] * case["T"], case["C"], case["k"], dtype, lambda t: t @ router.T)
    return {"x": rows.view(case["B"], case["T"], case["C"]).to(dtype=dtype, device=device)}


def check(built, x):
    modules.check(MOE, built, x)


# --------------------------------------------------------------------------- load_balancing_loss
# N tokens, E = num_experts, k = top_k.

LOSS_EDGES = (
    edge("13 tokens, top 2 of 5 experts", N=13, E=5, k=2),
    edge("3 of 8 experts per token", N=11, E=8, k=3),
    edge("top_k 1", N=9, E=6, k=1),
    edge("top_k = num_experts: every expert chosen by every token, the loss is num_experts", N=6, E=4, k=4),
    edge("2 tokens, 7 experts: at least 3 experts chosen by none", N=2, E=7, k=2),
    edge("one token", N=1, E=4, k=2),
    edge("one expert: the loss is 1", N=5, E=1, k=1),
)


def loss_sizes(rng, count: int) -> list[dict]:
    cases = []
    for index in range(count):
        E = rng.randint(2, 9)
        cases.append({"N": rng.randint(2, 40), "E": E, "k": 2 if index == 0 else rng.randint(1, E)})
    return cases


LOSS_CASES = CaseTable(draw=loss_sizes, edges=LOSS_EDGES, draws=3)


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


def call_loss(kata, router_logits, E: int, k: int):
    """(call, result), router_logits checked unchanged afterwards."""
    call = call_repr("load_balancing_loss", router_logits, E, k)
    result = call_and_check_inputs(
        lambda: kata.load_balancing_loss(router_logits, E, k), call, router_logits=router_logits
    )
    return call, result


def loss_replay(router_logits, E: int, k: int):
    """The same call with another implementation, on a copy taken now (for the diagnosis)."""
    saved = router_logits.clone()
    return lambda implementation: {"loss": call_loss(implementation, saved.clone(), E, k)[1]}


def check_loss(kata, case, router_logits) -> None:
    E, k = case["E"], case["k"]
    want = hf_load_balancing_loss(router_logits.detach().cpu().double(), E, k)
    want = want.to(dtype=router_logits.dtype, device=router_logits.device)
    with SPEC.diagnosing(loss_replay(router_logits, E, k), case):
        call, got = call_loss(kata, router_logits, E, k)
        assert_close(got, want, call=call, what="loss", tolerance=LOSS_TOLERANCES[router_logits.dtype])


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
    """(kata call, reference call, notes): x [8, 128, 512], 8 experts of d_ff 1024, top 2, in
    float32, eval() mode. PyTorch has no MoE: the reference is Hugging Face's
    MixtralSparseMoeBlock forward rewritten in the test (the same float32 weights); the notes
    time the dense formula the tests judge against (every expert on every token), what a
    sparse layer saves."""
    B, T, C, d_ff, E, k = 8, 128, 512, 1024, 8, 2
    reference = FastReference(C, d_ff, E, k, dtype=torch.float32).to(device).eval()
    dense = Reference(C, d_ff, E, k, dtype=torch.float32).to(device).eval()
    dense.load_state_dict(reference.state_dict())
    module = kata.MoELayer(C, d_ff, E, k)
    modules.load_parameters(module, dict(reference.named_parameters()), what=MOE.cls, asks=MOE.asks)
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

    return (lambda: module(x)), (lambda: reference(x)), notes


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

# --------------------------------------------------------------------------- the layer's values


@dtypes(*FULL)
def test_matches_a_dense_mixture_of_the_top_k_experts(kata, rng, gen, dtype, device):
    """y and router_logits against every expert run on every token, weighted by the
    renormalised top-k probabilities (0 for the experts not chosen)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(kata, gen, case, dtype, device)
            check(built, inputs(gen, built, case, dtype, device))


@dtypes(*HALF)
def test_works_in_half_precision(kata, rng, gen, dtype):
    """float16 and bfloat16: the routing softmax in float32, y and router_logits in x's dtype."""
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(kata, gen, case, dtype)
            check(built, inputs(gen, built, case, dtype))


def test_top_k_defaults_to_2(kata, rng, gen):
    """MoELayer(d_model, d_ff, num_experts) routes each token to its 2 largest experts."""
    case = Case("random draw", CASES.draw(rng, 1)[0]) | {"k": 2}
    with case.judged():
        built = build(kata, gen, case, default_top_k=True)
        check(built, inputs(gen, built, case))


# --------------------------------------------------------------------------- sparsity


def rows_per_expert(module, x: torch.Tensor, call: str) -> torch.Tensor:
    """int64 [E]: the rows (tokens) each of module.experts[e] received during module(x),
    counted by forward hooks; every input is checked unchanged afterwards."""
    experts = getattr(module, "experts", None)
    if not isinstance(experts, nn.ModuleList):
        raise AssertionError(f"{call}: the module has no nn.ModuleList `experts`; the kata asks for {ASKS}")
    C = x.shape[-1]
    counts = [0] * len(experts)

    def hook(e):
        def count(expert, args, kwargs, output):
            first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            counts[e] += 0 if first is None else first.numel() // C

        return count

    handles = [expert.register_forward_hook(hook(e), with_kwargs=True) for e, expert in enumerate(experts)]
    try:
        call_and_check_inputs(lambda: module(x), call, x=x)
    finally:
        for handle in handles:
            handle.remove()
    return torch.tensor(counts, dtype=torch.int64)


def check_sparse(built, case, x) -> None:
    call = call_repr(built.name, x)
    want = chosen_counts(built.reference.router(x.detach().double().reshape(-1, case["C"])).detach(), case["k"])
    N, k = case["B"] * case["T"], case["k"]
    saved = x.clone()

    def replay(implementation) -> dict:
        return {"rows per expert": rows_per_expert(built.remake(implementation), saved.clone(), call)}

    with SPEC.diagnosing(replay, case):
        got = rows_per_expert(built.module, x, call)
        if torch.equal(got, want):
            return
        shown = (
            f"expected {want.tolist()} (the tokens whose top_k = {k} choices include each expert, {N * k} rows in all)"
        )
        if not got.any():
            message = (
                f"{call} never called an expert module (rows per expert {got.tolist()}); call each expert as a "
                f"module, self.experts[e](rows), on the rows routed to it: the grader counts the rows each receives; "
                + shown
            )
        elif bool((got == N).all()):
            message = (
                f"{call} ran every expert on all {N} tokens (rows per expert {got.tolist()}): a dense mixture. "
                "A sparse MoE runs each expert only on the tokens routed to it, so each token passes through "
                f"exactly top_k experts; {shown}. Gather each expert's tokens (e.g. torch.where(selected == e)), "
                "call self.experts[e] on those rows only, and add the weighted outputs back at those rows (index_add)"
            )
        else:
            message = (
                f"{call} sent {got.tolist()} rows to the experts ({int(got.sum())} in all); {shown}: each token "
                "goes to exactly its top_k experts, each expert called only on the tokens that chose it"
            )
        raise Mismatch(message, what="rows per expert", actual=got, expected=want)


def test_each_expert_runs_only_on_the_tokens_routed_to_it(kata, rng, gen):
    """Forward hooks on experts[e] count the rows each receives: exactly the tokens that chose
    e, N * top_k in all; an expert no token chose may be skipped or called on 0 rows."""
    for case in CASES.cases(rng, 2):
        with case.judged():
            built = build(kata, gen, case, torch.float64)
            check_sparse(built, case, inputs(gen, built, case, torch.float64)["x"])


# --------------------------------------------------------------------------- gradients


def test_gradients_reach_x_the_router_and_the_chosen_experts(kata, rng, gen):
    """Autograd through the layer in float64 (random upstream gradients for y and router_logits)
    against autograd through the dense reference: x and every parameter. The router learns
    through the routing weights; an expert no token chose gets no gradient (None or zeros)."""
    for case in (*CASES.edges[:2], *CASES.random(rng, 2)):
        with case.judged():
            built = build(kata, gen, case, torch.float64)
            x = inputs(gen, built, case, torch.float64)["x"]
            N, E = case["B"] * case["T"], case["E"]
            grad_y, grad_logits = randn(gen, *x.shape, dtype=torch.float64), randn(gen, N, E, dtype=torch.float64)
            call = call_repr(built.name, x) + ".backward"

            def gradients(implementation, x=x, grad_y=grad_y, grad_logits=grad_logits, call=call, built=built):
                module = built.remake(implementation)
                leaf = x.clone().requires_grad_()
                got = outputs(module(leaf), call, {})
                for what, value in got.items():
                    if not isinstance(value, torch.Tensor) or not value.requires_grad:
                        raise AssertionError(f"{call}: {what} does not require grad; autograd lost track of x")
                ((got["y"] * grad_y).sum() + (got["router_logits"] * grad_logits).sum()).backward()
                if leaf.grad is None:
                    raise AssertionError(f"{call}: no gradient reached x")
                found = {"gradient of x": leaf.grad}
                for name, p in module.named_parameters():
                    found[f"gradient of {name}"] = torch.zeros_like(p) if p.grad is None else p.grad
                return found

            twin = x.clone().requires_grad_()
            params = dict(built.reference.named_parameters())
            y, logits = built.reference(twin)
            leaves = [twin, *params.values()]
            expected = torch.autograd.grad((y * grad_y).sum() + (logits * grad_logits).sum(), leaves)
            want = dict(zip(["gradient of x", *(f"gradient of {n}" for n in params)], expected))
            with SPEC.diagnosing(gradients, case):
                got = gradients(kata)
                for what, value in want.items():
                    if what not in got:
                        raise AssertionError(f"{call}: the module has no parameter {what.removeprefix('gradient of ')}")
                    assert_close(got[what], value, call=call, what=what, tolerance=GRADIENT_TOLERANCE)


# --------------------------------------------------------------------------- construction


def test_has_a_router_and_num_experts_distinct_swiglu_experts(kata, rng, gen):
    """router.weight [E, C] and experts.{e}.gate_proj/up_proj.weight [d_ff, C],
    experts.{e}.down_proj.weight [C, d_ff], every expert its own module: no biases."""
    build(kata, gen, Case("random draw", CASES.draw(rng, 2)[1]))


def test_top_k_outside_1_to_num_experts_raises_value_error(kata, rng):
    """top_k 0 and top_k num_experts + 1 are refused when the layer is built."""
    E = rng.randint(2, 6)
    for top_k, reason in ((0, "every token needs at least one expert"), (E + 1, f"only {E} experts to choose")):
        call = modules.module_repr("MoELayer", d_model=6, d_ff=10, num_experts=E, top_k=top_k)

        def attempt(implementation, top_k=top_k, reason=reason, call=call) -> dict:
            assert_raises_value_error(
                lambda: implementation.MoELayer(6, 10, E, top_k=top_k),
                call=call,
                reason=f"1 <= top_k <= num_experts: {reason}",
            )
            return {}

        with SPEC.diagnosing(attempt, {"E": E, "k": top_k}):
            attempt(kata)


# --------------------------------------------------------------------------- devices, output


def on_device(fn, device):
    """call_on_device, also inconclusive on "meta" for any data-dependent op (bincount, say)."""
    try:
        return call_on_device(fn, device)
    except (NotImplementedError, RuntimeError) as error:
        text = str(error).lower()
        if str(device) == "meta" and "meta tensor" in text and "device" not in text:
            raise Inconclusive(ROUTING_ON_META) from None
        raise


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """On a GPU judged in full. On "meta" (no GPU) only as far as the layer runs there: which
    tokens go to which expert is data, which "meta" lacks, so a sparse layer stops at its
    first data-dependent op (not judged, never counted); tensors mixed across devices before
    that still fail."""
    case = Case("random draw", CASES.draw(rng, 1)[0])
    built = build(kata, gen, case, device=other_device)
    x = inputs(gen, built, case, device=other_device)
    on_device(lambda: modules.check_on_device(MOE, built, case, x, other_device), other_device)


# --------------------------------------------------------------------------- load_balancing_loss


@dtypes(*FULL)
def test_load_balancing_loss_matches_hugging_faces_formula(kata, rng, gen, dtype, device):
    """num_experts * sum over j, e of f[j, e] * P[e]: f[j, e] the fraction of tokens whose j-th
    choice is e, P[e] the mean probability of e; returned in router_logits' dtype."""
    for case in LOSS_CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            check_loss(kata, case, make_logits(gen, case, dtype, device))


@dtypes(*HALF)
def test_load_balancing_loss_in_half_precision(kata, rng, gen, dtype):
    """float16 and bfloat16 logits: the softmax in float32, the loss rounded to their dtype."""
    for case in LOSS_CASES.random(rng, 3):
        with case.judged():
            check_loss(kata, case, make_logits(gen, case, dtype))


def test_load_balancing_loss_gradient_flows_to_router_logits_through_p(kata, rng, gen):
    """Autograd through the loss in float64 against autograd through Hugging Face's formula: the
    counts f carry no gradient, the mean probabilities P do."""
    for case in (*LOSS_CASES.edges[:2], *LOSS_CASES.random(rng, 2)):
        with case.judged():
            logits = make_logits(gen, case)
            E, k = case["E"], case["k"]
            upstream = float(randn(gen, 1, dtype=torch.float64))
            call = call_repr("load_balancing_loss", logits, E, k) + ".backward"

            def gradient(implementation, logits=logits, E=E, k=k, upstream=upstream, call=call) -> dict:
                leaf = logits.clone().requires_grad_()
                _, loss = call_loss(implementation, leaf, E, k)
                if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
                    raise AssertionError(
                        f"{call}: the loss does not require grad; autograd lost track of router_logits"
                    )
                (loss * upstream).backward()
                if leaf.grad is None:
                    raise AssertionError(f"{call}: no gradient reached router_logits")
                return {"gradient of router_logits": leaf.grad}

            twin = logits.clone().requires_grad_()
            (hf_load_balancing_loss(twin, E, k) * upstream).backward()
            with SPEC.diagnosing(gradient, case):
                got = gradient(kata)["gradient of router_logits"]
                assert_close(
                    got, twin.grad, call=call, what="gradient of router_logits", tolerance=LOSS_GRADIENT_TOLERANCE
                )


def test_load_balancing_loss_raises_value_error_unless_1_le_top_k_le_num_experts(kata, rng, gen):
    E = rng.randint(2, 6)
    logits = make_logits(gen, {"N": 5, "E": E, "k": 1})
    for top_k in (0, E + 1):
        call = call_repr("load_balancing_loss", logits, E, top_k)

        def attempt(implementation, top_k=top_k, call=call) -> dict:
            assert_raises_value_error(
                lambda: implementation.load_balancing_loss(logits.clone(), E, top_k),
                call=call,
                reason="1 <= top_k <= num_experts",
            )
            return {}

        with SPEC.diagnosing(attempt, {"E": E, "k": top_k}):
            attempt(kata)


def test_load_balancing_loss_follows_the_device_of_router_logits(kata, rng, gen, other_device):
    """Counts and means made inside the loss must be made on router_logits' device."""
    for case in (LOSS_CASES.edges[0], *LOSS_CASES.random(rng, 1)):
        with case.judged():
            logits = make_logits(gen, case, torch.float32, other_device)
            if other_device != "meta":
                check_loss(kata, case, logits)
                continue
            want = torch.empty((), dtype=logits.dtype, device="meta")  # meta: a shape and a device, no values
            with SPEC.diagnosing(loss_replay(logits, case["E"], case["k"]), case):
                call, got = on_device(lambda: call_loss(kata, logits, case["E"], case["k"]), other_device)
                check_tensor_kind(got, want, call=call, what="loss")

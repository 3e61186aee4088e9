"""moe: the layer is sparse, each expert run only on the tokens routed to it.

Judged twice. By value: one expert is given weights that overflow (to inf) on exactly the
tokens NOT routed to it and stay finite on those routed to it (the router ignores the feature
that makes them overflow), so a layer that runs every expert on every token and masks the
outputs afterwards (a routing weight of 0 times inf is NaN) returns NaN where a sparse one
returns the reference's finite y. And by the kata's word: forward hooks, registered on the
learner's experts[e] inside a scenario, count the rows each expert module receives, which must
be exactly the tokens that chose it (top_k per token, N * top_k in all); an expert that no
token chose may be skipped or called on 0 rows (both count 0)."""

from __future__ import annotations

import torch
from torch import nn

from judge.language import pick
from judge.testing import modules
from judge.testing.checks import Mismatch, call_repr, describe
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import dtypes
from judge.testing.tiers import core

from .common import ASKS, CASES, FULL, MARGINS, MOE, SPEC, build, check, chosen_counts, inputs, separated

# --------------------------------------------------------------------------- by value: an expert that overflows

# The feature that makes the chosen expert overflow: 1e10 in the tokens not routed to it, 0 in
# the others; its gate_proj and up_proj weights on that feature are HUGE, so gate_proj(x) and
# up_proj(x) reach 1e10 * HUGE there and their product overflows (float32: 1e50 > 3.4e38;
# float64: 1e320 > 1.8e308). Every other weight on that feature is 0 (the router's included).
BIG = 1e10
HUGE = {torch.float32: 1e15, torch.float64: 1e150}
ROUTING_LOGIT = 4.0  # the chosen expert's logit: +4 for the tokens routed to it, -4 for the others


def overflowing(gen, rng, case, dtype, device="cpu") -> tuple:
    """(the layer's recipe and reference, x): expert e (drawn) overflows on exactly the tokens
    not routed to it. Feature 0 is BIG where the token is not routed to e, feature 1 is +1 or -1
    (the router's only input for e), features 2.. are random and route the other experts, their
    top_k + 1 largest logits drawn apart (the -4 and +4 of e included)."""
    built = build(gen, case, dtype, device)
    reference = built.reference
    E, C, N = case["E"], case["C"], case["B"] * case["T"]
    e = rng.randrange(E)
    with torch.no_grad():
        router = reference.router.weight
        router[:, :2] = 0
        router[e] = 0
        router[e, 1] = ROUTING_LOGIT
        for index, expert in enumerate(reference.experts):
            for proj in (expert.gate_proj, expert.up_proj):
                proj.weight[:, 0] = HUGE[dtype] if index == e else 0.0
                proj.weight.copy_(proj.weight.to(dtype).double())
    built.recipe["state"] = {name: p.detach().to(dtype) for name, p in MOE.parameters(reference).items()}
    routed = torch.rand(N, generator=gen) < 0.5
    routed[0], routed[-1] = True, False  # one token of each kind at least
    sign = torch.where(routed, 1.0, -1.0).double()
    rows = torch.zeros(N, C, dtype=torch.float64)
    rows[:, 0] = torch.where(routed, 0.0, BIG)
    rows[:, 1] = sign
    W = router.detach()

    def logits(rest: torch.Tensor) -> torch.Tensor:
        return rest @ W[:, 2:].T + ROUTING_LOGIT * sign[:, None] * (torch.arange(E) == e)

    def unfit(rest: torch.Tensor) -> torch.Tensor:
        """bool [N]: rows whose logits are not separated, or whose top_k chooses e where the
        token is not routed to it (the +-4 decides only while the other experts' logits lie
        between: with few experts, one of them can fall below -4) or misses it where it is."""
        scores = logits(rest)
        chosen = (scores.topk(case["k"], dim=-1).indices == e).any(-1)
        return ~separated(scores, case["k"], MARGINS[dtype]) | (chosen != routed)

    rest = randn(gen, N, C - 2, dtype=torch.float64).to(dtype).double()
    for _ in range(200):
        bad = unfit(rest)
        if not bad.any():
            break
        rest[bad] = randn(gen, int(bad.sum()), C - 2, dtype=torch.float64).to(dtype).double()
    assert not unfit(rest).any(), f"no overflowing rows could be drawn for {case}"  # a test bug: never judge it
    rows[:, 2:] = rest
    return built, rows.view(case["B"], case["T"], C).to(dtype=dtype, device=device)


def overflow_cases(rng) -> list:
    """The cases with a token both routed and not routed to an expert: k < E, two tokens at
    least, and room for the two features of the construction beside one that routes."""
    return [c for c in CASES.cases(rng) if c["k"] < c["E"] and c["B"] * c["T"] >= 2 and c["C"] >= 3]


@core(zh="专家从不在未路由给它的 token 上运行")
@dtypes(*FULL)
def test_an_expert_never_runs_on_tokens_not_routed_to_it(kata, rng, gen, dtype, device):
    """One expert overflows (inf) on exactly the tokens not routed to it: y must still be the
    reference's, finite. A layer that runs it on every token and masks its output afterwards
    returns NaN there (inf * 0)."""
    for case in overflow_cases(rng):
        with case.judged():
            built, x = overflowing(gen, rng, case, dtype, device)
            check(kata, built, x)


# --------------------------------------------------------------------------- by the kata's word: hooks


@scenario
def rows_per_expert(kata, recipe: dict, x) -> dict:
    """The learner's layer built from the recipe, called on x with a forward hook on each of its
    experts[e]: the rows (tokens) each expert module received, int64 [E]."""
    module, problem = modules.made(kata, recipe)
    if problem:
        return problem
    experts = getattr(module, "experts", None)
    if not isinstance(experts, nn.ModuleList):
        return {"no experts": describe(experts)}
    C = x.shape[-1]
    counts = [0] * len(experts)

    def hook(e):
        def count(expert, args, kwargs, output):
            first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            counts[e] += 0 if first is None else first.numel() // C

        return count

    handles = [expert.register_forward_hook(hook(e), with_kwargs=True) for e, expert in enumerate(experts)]
    try:
        module(x)
    finally:
        for handle in handles:
            handle.remove()
    return {"rows per expert": torch.tensor(counts, dtype=torch.int64)}


def counted(implementation, built, x, call: str) -> dict:
    got = modules.built_module(MOE, built, rows_per_expert(implementation, built.recipe, x))
    if "no experts" in got:
        raise AssertionError(
            pick(
                f"{call}: the module's `experts` is {got['no experts']}, no nn.ModuleList; the kata asks for {ASKS}",
                f"{call}：模块的 `experts` 是 {got['no experts']}，不是 nn.ModuleList；题目要求 {ASKS}",
            )
        )
    return got


def check_sparse(kata, built, case, x) -> None:
    call = call_repr(built.name, x)
    want = chosen_counts(built.reference.router(x.detach().double().reshape(-1, case["C"])).detach(), case["k"])
    N, k = case["B"] * case["T"], case["k"]
    with diagnosing(SPEC.kata, lambda implementation: counted(implementation, built, x, call), case):
        got = counted(kata, built, x, call)["rows per expert"]
        if torch.equal(got, want):
            return
        shown = pick(
            f"expected {want.tolist()} (the tokens whose top_k = {k} choices include each expert, {N * k} rows in all)",
            f"应为 {want.tolist()}（每个专家收到的是 top_k = {k} 个选择中包含它的 token，共 {N * k} 行）",
        )
        if not got.any():
            message = pick(
                f"{call} never called an expert module (rows per expert {got.tolist()}); call each expert as a "
                f"module, self.experts[e](rows), on the rows routed to it: the grader counts the rows each receives; "
                + shown,
                f"{call} 从未调用任何专家模块（各专家收到的行数 {got.tolist()}）；请把每个专家当作模块调用，"
                f"self.experts[e](rows)，只传入路由给它的行：评测器统计每个专家收到的行数；" + shown,
            )
        elif bool((got == N).all()):
            message = pick(
                f"{call} ran every expert on all {N} tokens (rows per expert {got.tolist()}): a dense mixture. "
                "A sparse MoE runs each expert only on the tokens routed to it, so each token passes through "
                f"exactly top_k experts; {shown}. Gather each expert's tokens (e.g. torch.where(selected == e)), "
                "call self.experts[e] on those rows only, and add the weighted outputs back at those rows (index_add)",
                f"{call} 让每个专家都在全部 {N} 个 token 上运行（各专家收到的行数 {got.tolist()}）：这是稠密混合。"
                "稀疏 MoE 只在路由给某个专家的 token 上运行该专家，因此每个 token 恰好经过 top_k 个专家；"
                f"{shown}。先收集每个专家的 token（例如 torch.where(selected == e)），只在这些行上调用 "
                "self.experts[e]，再把加权后的输出加回这些行（index_add）",
            )
        else:
            message = pick(
                f"{call} sent {got.tolist()} rows to the experts ({int(got.sum())} in all); {shown}: each token "
                "goes to exactly its top_k experts, each expert called only on the tokens that chose it",
                f"{call} 发给各专家的行数是 {got.tolist()}（共 {int(got.sum())} 行）；{shown}：每个 token "
                "恰好送到它的 top_k 个专家，每个专家只在选择了它的 token 上调用",
            )
        raise Mismatch(message, what="rows per expert", actual=got, expected=want)


@core(zh="每个专家只在路由给它的 token 上运行")
def test_each_expert_runs_only_on_the_tokens_routed_to_it(kata, rng, gen):
    """Forward hooks on experts[e] count the rows each receives: exactly the tokens that chose
    e, N * top_k in all; an expert no token chose may be skipped or called on 0 rows."""
    for case in CASES.cases(rng, 2):
        with case.judged():
            built = build(gen, case, torch.float64)
            check_sparse(kata, built, case, inputs(gen, built, case, torch.float64))

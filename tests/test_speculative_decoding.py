"""speculative_decoding: the accept/reject step, token for token against Hugging Face's
`_speculative_sampling` rewritten here in float64, on a generator seeded alike.

`reference` below is HF's routine (transformers/generation/utils.py) for batch 1, written in
float64 with the random numbers drawn in the order the stub states: u = torch.rand(k,
float64) once (none when k = 0), then one torch.multinomial over the residual max(0, p_n -
q_n) or, when every draft is accepted, over p_k. A generator is no data: each scenario is
given seeds and makes its generators where the kata runs; it returns, per seed, the ids
and the generator's state after the call, both compared exactly with the reference's (the
state tells a draw too many, too few or out of order even where the ids agree).

The theorem (Leviathan et al. 2023; Chen et al. 2023) is checked as well: the identity
min(p, q) + (1 - sum min(p, q)) * residual = p is asserted on the judge's side, and the
first id the kata returns is distributed as p_0 over 10000 seeds (the contract says 20000: a
call costs 80 us, 150 us in HF's form, and every convention slip pays for it), drafts drawn from q with
a generator of the test's own, every count within 5 standard errors: one scenario call
that loops in the kata process, after the exact tests (a slip is graded up to its first
failure, and every known one fails an exact test first).

Tolerances: none. Ids and generator states are compared exactly. Measured over 100 seeds x
every case of the table (float32 and float64 inputs), the solution, both variants and the
reference agreed on every id and state; a float32 step would flip an acceptance only where
u lies within float32 rounding of p/q (about 1e-8 per draft), which the float64 rule's
convention test provokes on purpose.
"""

from __future__ import annotations

import math

import torch

from judge.forbidden import NONE, ForbiddenCallError
from judge.language import pick
from judge.testing.checks import Mismatch, call_repr
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import FLOAT64_RULE, CaseTable, KataSpec, edge
from judge.testing.tiers import convention, core

SEEDS_PER_CASE = 6  # generator seeds each case is played on
FREQUENCY_SEEDS = 10000  # the contract asks 20000: 80 us a call (150 us for HF's) made that 1.7 s a grade

# --------------------------------------------------------------------------- the reference


def reference(draft_tokens, draft_probs, target_probs, seed: int) -> dict:
    """HF's _speculative_sampling for one sequence, float64, on a generator seeded `seed`:
    {"tokens", "state" (the generator's after), "u", "ratio", "n"}."""
    generator = torch.Generator().manual_seed(seed)
    k = draft_tokens.numel()
    q = draft_probs.detach().cpu().double()[None]  # (1, k, V)
    p = target_probs.detach().cpu().double()[None]  # (1, k+1, V)
    ids = draft_tokens.cpu()[None]  # (1, k)
    q_i = q[:, torch.arange(k), ids[0]].squeeze(0)  # (k,)
    p_i = p[:, torch.arange(k), ids[0]].squeeze(0)
    probability_ratio = p_i / q_i
    r_i = torch.rand(k, generator=generator, dtype=torch.float64) if k else torch.zeros(0, dtype=torch.float64)
    is_accepted = r_i <= probability_ratio
    n_matches = int(((~is_accepted).cumsum(dim=-1) < 1).sum())
    p_n_plus_1 = p[:, n_matches, :]
    if n_matches < k:
        p_prime = torch.clamp(p_n_plus_1 - q[:, n_matches, :], min=0)
        p_prime = p_prime / p_prime.sum()
    else:
        p_prime = p_n_plus_1
    t = torch.multinomial(p_prime, num_samples=1, generator=generator).squeeze(1)
    tokens = ids[0, :n_matches].tolist() + t.tolist()
    return {"tokens": tokens, "state": generator.get_state(), "u": r_i, "ratio": probability_ratio, "n": n_matches}


def first_token_law(p0: torch.Tensor, q0: torch.Tensor) -> torch.Tensor:
    """P(first id = t) when x ~ q0 is accepted with probability min(1, p0/q0), else the
    residual is drawn: min(p, q) + (1 - sum min(p, q)) * residual (the theorem's two terms)."""
    both = torch.minimum(p0, q0)
    residual = (p0 - q0).clamp(min=0)
    rejected = 1 - both.sum()
    return both + rejected * residual / residual.sum() if residual.sum() > 0 else both


# --------------------------------------------------------------------------- cases

# Sizes: k (drafts), V, kind (how p relates to q), dtype (of the probabilities).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("rejected at once: p_0[x_0] = 0", "第一个草稿就被拒绝：p_0[x_0] = 0",
         k=3, V=6, kind="rejected at once", dtype="float32"),
    edge("all accepted: the bonus token from p_k", "全部接受：从 p_k 抽取额外的 token",
         k=4, V=7, kind="all accepted", dtype="float32"),
    edge("residual with one non-zero entry", "残差分布只有一个非零项",
         k=3, V=5, kind="one-entry residual", dtype="float64"),
    edge("draft equals target: always accepted", "草稿分布等于目标分布：总被接受",
         k=3, V=5, kind="draft equals target", dtype="float64"),
    edge("no drafts (k = 0): one token from p_0", "没有草稿（k = 0）：从 p_0 抽取一个 token",
         k=0, V=6, kind="random", dtype="float32"),
)
# fmt: on


def hidden_cases(rng, count: int) -> list[dict]:
    """k from 1 to 8, V from 2 to 16, p near q (acceptances and rejections at every position)."""
    return [
        {
            "k": rng.randint(1, 8),
            "V": rng.randint(2, 16),
            "kind": "random",
            "dtype": rng.choice(["float32", "float64"]),
        }
        for _ in range(count)
    ]


def softmax(logits: torch.Tensor) -> torch.Tensor:
    return (logits - logits.amax(-1, keepdim=True)).exp() / (logits - logits.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True)


def make_inputs(gen, case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(draft_tokens long [k], draft_probs [k, V], target_probs [k+1, V]) of the case's kind,
    in its dtype; x_i drawn from q_i with the test's generator."""
    k, V, kind = case["k"], case["V"], case["kind"]
    logits = randn(gen, k, V, dtype=torch.float64, std=1.5)
    q = softmax(logits)  # (k, V)
    x = torch.multinomial(q, 1, generator=gen).squeeze(-1) if k else torch.zeros(0, dtype=torch.long)
    p = softmax(torch.cat([logits + randn(gen, k, V, dtype=torch.float64, std=0.8), randn(gen, 1, V, dtype=torch.float64)]))
    rows = torch.arange(k)
    if kind == "rejected at once":
        p[0, x[0]] = 0.0
        p[0] /= p[0].sum()
    elif kind == "all accepted":
        p[:k] = 0.5 * q + 0.5 * torch.nn.functional.one_hot(x, V).double()  # p_i[x_i] >= q_i[x_i]
    elif kind == "draft equals target":
        p[:k] = q
    elif kind == "one-entry residual":
        p[:k] = q
        others = (x + 1 + torch.randint(V - 1, (k,), generator=gen)) % V  # j_i != x_i
        moved = 0.7 * q[rows, x]
        p[rows, x] -= moved  # the ratio p_i[x_i] / q_i[x_i] is 0.3
        p[rows, others] += moved  # and p_i - q_i is positive at j_i alone
    dtype = getattr(torch, case["dtype"])
    q, p = q.to(dtype), p.to(dtype)
    return x, q, p  # rows that agree in float64 round alike: the residual stays exactly 0 there


def sizes(draft_tokens, draft_probs) -> dict:
    return {"k": draft_tokens.numel(), "V": draft_probs.size(-1)}


def text(draft_tokens, draft_probs, target_probs) -> str:
    return call_repr("speculative_accept", draft_tokens, draft_probs, target_probs, "<torch.Generator>")


# --------------------------------------------------------------------------- benchmark


def benchmark(kata, device):
    """(kata call, reference call): k = 8 drafts over Llama's 32000-token vocabulary, float32
    probabilities; the reference is the float64 rewrite of HF's routine above."""
    gen = torch.Generator().manual_seed(0)
    logits = randn(gen, 8, 32000, dtype=torch.float64, std=2.0)
    q = softmax(logits).float().to(device)
    p = softmax(torch.cat([logits + randn(gen, 8, 32000, dtype=torch.float64, std=0.5), randn(gen, 1, 32000)])).float()
    x = torch.multinomial(q.double().cpu(), 1, generator=gen).squeeze(-1).to(device)
    p = p.to(device)
    mine = torch.Generator(device=device).manual_seed(1)
    return (lambda: kata.speculative_accept(x, q, p, mine)), (lambda: reference(x, q, p, 1))


SPEC = KataSpec(
    kata="speculative_decoding",
    symbol="speculative_accept",
    reference=(
        "Hugging Face's `_speculative_sampling` rewritten in float64 with the same random-number order, "
        "token for token on a generator seeded alike; the first token's law p_0 checked over 10000 seeds"
    ),
    forbidden=NONE,  # nothing in PyTorch does this step: torch.rand and torch.multinomial are the tools
    tolerances={},  # ids and generator states are compared exactly
    tolerance_note=(
        "ids and the generator's state compared exactly; 100 seeds x every case: solution, variants and "
        "reference agreed on all; the first id's frequencies within 5 standard errors of p_0 over 10000 seeds"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=4),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


def _called(kata, args, generator):
    """The kata's ids, or what it raised as a sentence (the stub's and the guard's own errors propagate)."""
    try:
        return kata.speculative_accept(*args, generator)
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the judge decides what was expected
        return f"raised {type(error).__name__}: {error}"


@scenario
def accepted(kata, draft_tokens, draft_probs, target_probs, seeds: list) -> dict:
    """For each seed, the ids of speculative_accept on a generator seeded so (or what it
    raised, as text) and the generator's state after the call; the inputs as the calls left them."""
    tokens, states, inputs = [], [], []
    for seed in seeds:
        generator = torch.Generator(device=draft_probs.device).manual_seed(seed)
        args = [draft_tokens.clone(), draft_probs.clone(), target_probs.clone()]  # each call its own inputs
        tokens.append(_called(kata, args, generator))
        states.append(generator.get_state())
        inputs.append(args)
    calls = [[ids, state] for ids, state in zip(tokens, states)]  # what the diagnosis compares
    return {"tokens": tokens, "generator state": states, "calls": calls, "inputs": inputs}


@scenario
def refused(kata, draft_tokens, draft_probs, target_probs, seed: int) -> dict:
    """What the call did (raised ValueError, raised another error, returned) and whether the
    generator moved."""
    generator = torch.Generator().manual_seed(seed)
    before = generator.get_state()
    try:
        kata.speculative_accept(draft_tokens, draft_probs, target_probs, generator)
        outcome = "returned normally"
    except ValueError:
        outcome = "raised ValueError"
    except (NotImplementedError, ForbiddenCallError):
        raise
    except Exception as error:  # noqa: BLE001 - the message names what was raised instead
        outcome = f"raised {type(error).__name__}: {error}"
    return {"outcome": outcome, "generator moved": not torch.equal(before, generator.get_state())}


@scenario
def first_tokens(kata, draft_probs, target_probs, draft_seed: int, seed: int, n: int) -> dict:
    """The first id of n calls: drafts x_i ~ q_i from a generator of the test's own (seeded
    draft_seed), the kata's generator seeded seed, seed + 1, ... in turn."""
    drafts = torch.multinomial(draft_probs.double(), n, replacement=True, generator=torch.Generator().manual_seed(draft_seed))
    drafts = drafts.T.contiguous()  # (n, k)
    generator = torch.Generator()
    first = []
    for i in range(n):
        generator.manual_seed(seed + i)
        args = (drafts[i], draft_probs.clone(), target_probs.clone())  # each call its own inputs
        first.append(int(kata.speculative_accept(*args, generator)[0]))
    return {"first": torch.tensor(first)}


# --------------------------------------------------------------------------- checks


def check_ids(got, want, call: str, every: list, wanted: list) -> None:
    """A list of Python ints (`every`, `wanted`: all seeds' [ids, state], for the diagnosis)."""

    def mismatch(message: str) -> Mismatch:
        return Mismatch(message, what="calls", actual=every, expected=wanted, kind_only=True)

    if isinstance(got, str):
        raise mismatch(pick(f"{call} {got}; expected the ids {want}", f"{call} {got}；应返回 id {want}"))
    if not isinstance(got, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in got):
        raise mismatch(
            pick(
                f"{call} returned {type(got).__name__} {got!r:.200}; expected a list of Python ints, e.g. "
                "draft_tokens[:n].tolist() + [int(token)]",
                f"{call} 返回了 {type(got).__name__} {got!r:.200}；应返回 Python int 的列表，例如 "
                "draft_tokens[:n].tolist() + [int(token)]",
            )
        )


def judge_calls(kata, draft_tokens, draft_probs, target_probs, seeds) -> None:
    """Every seed's ids, then every seed's generator state, exactly as the reference's."""
    call = text(draft_tokens, draft_probs, target_probs)
    want = [reference(draft_tokens, draft_probs, target_probs, seed) for seed in seeds]

    def replay(implementation) -> dict:
        return accepted(implementation, draft_tokens, draft_probs, target_probs, seeds)

    with SPEC.diagnosing(replay, sizes(draft_tokens, draft_probs)):
        got = replay(kata)
        # every seed's [ids, generator state]: a wrong result is told from the known slips by both
        wanted = [[ref["tokens"], ref["state"]] for ref in want]
        for mine, ref in zip(got["tokens"], want):
            check_ids(mine, ref["tokens"], call, got["calls"], wanted)
        for seed, mine, ref in zip(seeds, got["tokens"], want):
            if mine != ref["tokens"]:
                ratio = [round(float(r), 4) for r in ref["ratio"]]
                u = [round(float(v), 4) for v in ref["u"]]
                raise Mismatch(
                    pick(
                        f"{call} on a generator seeded {seed} returned {mine}, expected {ref['tokens']}: with "
                        f"u = torch.rand(k, float64) = {u} and p_i[x_i] / q_i[x_i] = {ratio}, the leading run of "
                        f"u[i] <= ratio[i] accepts n = {ref['n']} drafts, then one torch.multinomial draws "
                        + ("the bonus token from p_k" if ref["n"] == len(u) else f"from the residual max(0, p_{ref['n']} - q_{ref['n']})"),
                        f"{call} 在种子为 {seed} 的 generator 上返回 {mine}，应为 {ref['tokens']}：u = torch.rand(k, float64) "
                        f"= {u}，p_i[x_i] / q_i[x_i] = {ratio}，从头连续满足 u[i] <= ratio[i] 的草稿共 n = {ref['n']} 个，"
                        "然后调用一次 torch.multinomial，"
                        + ("从 p_k 抽取额外的 token" if ref["n"] == len(u) else f"从残差 max(0, p_{ref['n']} - q_{ref['n']}) 抽样"),
                    ),
                    what="calls",
                    actual=got["calls"],
                    expected=wanted,
                )
        for seed, state, ref in zip(seeds, got["generator state"], want):
            if not torch.equal(state, ref["state"]):
                raise Mismatch(
                    pick(
                        f"{call} on a generator seeded {seed} returned the right ids but left the generator in "
                        "another state than torch.rand(k, generator=generator, dtype=torch.float64) followed by one "
                        "torch.multinomial(dist, 1, generator=generator): it drew random numbers it should not have "
                        "(or too few); the next step of a generation would go astray",
                        f"{call} 在种子为 {seed} 的 generator 上返回的 id 正确，但 generator 的状态与先调用 "
                        "torch.rand(k, generator=generator, dtype=torch.float64)、再调用一次 "
                        "torch.multinomial(dist, 1, generator=generator) 之后的状态不同：多抽（或少抽）了随机数，"
                        "生成的下一步就会出错",
                    ),
                    what="calls",
                    actual=got["calls"],
                    expected=wanted,
                )


# --------------------------------------------------------------------------- core


@core(zh="与 Hugging Face 的 _speculative_sampling 在相同种子下逐个 token 一致")
def test_matches_hugging_face_speculative_sampling_token_for_token_under_the_same_seed(kata, rng, gen):
    for case in SPEC.cases.cases(rng):
        with case.judged():
            draft_tokens, draft_probs, target_probs = make_inputs(gen, case)
            seeds = [rng.randrange(2**31) for _ in range(SEEDS_PER_CASE)]
            judge_calls(kata, draft_tokens, draft_probs, target_probs, seeds)


@core(zh="第一个 token 的分布恰好是 p_0（10000 个种子，5 个标准误以内）")
def test_the_first_token_is_distributed_as_p0_over_10000_seeds(kata):
    """Fixed seeds: k = 2 drafts over V = 4, p_0 far from q_0 (rejections are common). The
    analytic identity first, on the judge's side; then the kata's frequencies."""
    gen = torch.Generator().manual_seed(20230518)
    q = softmax(randn(gen, 2, 4, dtype=torch.float64, std=1.0))
    p = softmax(randn(gen, 3, 4, dtype=torch.float64, std=1.0))
    law = first_token_law(p[0], q[0])
    assert torch.allclose(law, p[0], rtol=0, atol=1e-12), "the theorem's identity min(p,q) + (1 - sum min) * residual = p"
    n = FREQUENCY_SEEDS
    call = text(torch.zeros(2, dtype=torch.long), q, p)

    def check(implementation) -> dict:
        first = first_tokens(implementation, q, p, 7, 1000, n)["first"]
        counts = torch.bincount(first.clamp(0, 3), minlength=4).double()
        for token in range(4):
            expected, error = n * float(p[0, token]), math.sqrt(n * float(p[0, token] * (1 - p[0, token])))
            if abs(counts[token] - expected) > 5 * error:
                raise AssertionError(
                    pick(
                        f"{call}, {n} calls with drafts x_i ~ q_i: the first id was {token} {int(counts[token])} times, "
                        f"expected {expected:.0f} +- {error:.0f} (p_0[{token}] = {float(p[0, token]):.4f}): "
                        f"{abs(counts[token] - expected) / error:.1f} standard errors off. Counts {counts.long().tolist()}, "
                        f"expected {[round(n * float(v)) for v in p[0]]}: accepted drafts and residual draws together must "
                        "give exactly p_0",
                        f"{call}，草稿 x_i ~ q_i，调用 {n} 次：第一个 id 为 {token} 的次数是 {int(counts[token])}，"
                        f"期望 {expected:.0f} +- {error:.0f}（p_0[{token}] = {float(p[0, token]):.4f}）："
                        f"偏离了 {abs(counts[token] - expected) / error:.1f} 个标准误。各 id 的次数 {counts.long().tolist()}，"
                        f"期望 {[round(n * float(v)) for v in p[0]]}：被接受的草稿与从残差抽出的 token 合起来必须恰好服从 p_0",
                    )
                )
        return {}

    with SPEC.diagnosing(check, {"k": 2, "V": 4}):
        check(kata)


# --------------------------------------------------------------------------- conventions

VALIDATION = "ValueError, checked for every draft before any random number is drawn"


def bad_inputs(gen) -> list[tuple[str, str, tuple]]:
    """(what is wrong, in English and Chinese, the arguments) for each refusal the stub names."""
    x, q, p = make_inputs(gen, {"k": 3, "V": 5, "kind": "random", "dtype": "float32"})
    zero_last = q.clone()
    zero_last[2, x[2]] = 0.0  # the last draft: a kata that checks lazily has drawn by then
    return [
        ("draft_tokens is 2-D [k, 1]", "draft_tokens 是二维的 [k, 1]", (x[:, None], q, p)),
        ("draft_probs has k - 1 rows", "draft_probs 只有 k - 1 行", (x, q[:2], p)),
        ("target_probs has k rows, not k + 1", "target_probs 只有 k 行，而不是 k + 1 行", (x, q, p[:3])),
        ("target_probs has another V", "target_probs 的 V 不同", (x, q, p[:, :4])),
        ("q_2[x_2] == 0 for the last draft", "最后一个草稿的 q_2[x_2] == 0", (x, zero_last, p)),
    ]


@convention(VALIDATION, zh="形状不符或 q_i[x_i] == 0 时抛出 ValueError")
def test_bad_shapes_and_a_draft_of_probability_zero_raise_value_error(kata, gen):
    for reason, reason_zh, args in bad_inputs(gen):
        call = text(*args)

        def check(implementation, args=args, reason=reason, reason_zh=reason_zh, call=call) -> dict:
            got = refused(implementation, *args, 5)["outcome"]
            if got != "raised ValueError":
                raise AssertionError(
                    pick(
                        f"{call} {got}; expected ValueError ({reason})",
                        f"{call} {got.replace('returned normally', '正常返回了')}；应抛出 ValueError（{reason_zh}）",
                    )
                )
            return {}

        with SPEC.diagnosing(check, {}):
            check(kata)


@convention(VALIDATION + " (the generator is left as it was)", zh="抛出 ValueError 之前不抽取任何随机数")
def test_a_refused_call_leaves_the_generator_as_it_was(kata, gen):
    for reason, reason_zh, args in bad_inputs(gen):
        call = text(*args)

        def check(implementation, args=args, reason=reason, reason_zh=reason_zh, call=call) -> dict:
            got = refused(implementation, *args, 5)
            if got["outcome"] == "raised ValueError" and got["generator moved"]:
                raise AssertionError(
                    pick(
                        f"{call} raised ValueError ({reason}) but only after drawing from the generator: check every "
                        "shape and every q_i[x_i] before torch.rand, so a refused call leaves the generator as it was",
                        f"{call} 抛出了 ValueError（{reason_zh}），但在此之前已经从 generator 抽取了随机数："
                        "应在 torch.rand 之前检查所有形状和每个 q_i[x_i]，使被拒绝的调用不改变 generator 的状态",
                    )
                )
            return {}

        with SPEC.diagnosing(check, {}):
            check(kata)


@convention(FLOAT64_RULE, zh="float64 输入全程在 float64 中计算")
def test_float64_probabilities_decide_at_float64_precision(kata, rng):
    """p_0[x_0] / q_0[x_0] set 1e-12 above the seed's u[0] (q_0[x_0] = 0.5, so the ratio is exact):
    accepted in float64; a float32 step rounds the ratio below u[0] and rejects it."""
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    x, q, p = make_inputs(gen, {"k": 2, "V": 5, "kind": "random", "dtype": "float64"})
    for seed in range(rng.randrange(1000), 100000):
        u0 = float(torch.rand(1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
        ratio = u0 + 1e-12
        if ratio < 0.9 and float(torch.tensor(ratio, dtype=torch.float32)) < u0:
            break
    q[0] = q[0] / (q[0].sum() - q[0, x[0]]) * 0.5  # the others share 0.5
    q[0, x[0]] = 0.5
    p[0] = p[0] / (p[0].sum() - p[0, x[0]]) * (1 - 0.5 * ratio)
    p[0, x[0]] = 0.5 * ratio
    judge_calls(kata, x, q, p, [seed])


@convention("the inputs are never changed in place.", zh="不修改输入")
def test_the_inputs_are_left_alone(kata, rng, gen):
    for case in (EDGES[0], EDGES[2], *SPEC.cases.random(rng, 1)):
        with case.judged():
            for dtype in ("float32", "float64"):
                args = make_inputs(gen, case | {"dtype": dtype})
                seeds = [rng.randrange(2**31) for _ in range(3)]
                call = text(*args)

                def check(implementation, args=args, seeds=seeds, call=call) -> dict:
                    for came in accepted(implementation, *args, seeds)["inputs"]:
                        for name, before, after in zip(("draft_tokens", "draft_probs", "target_probs"), args, came):
                            if torch.equal(before, after):
                                continue
                            raise AssertionError(
                                pick(
                                    f"{call} modified its `{name}` argument in place; work on a copy "
                                    "(.to(torch.float64) returns the very tensor when it is float64 already)",
                                    f"{call} 原地修改了参数 `{name}`；请在副本上操作"
                                    "（张量已经是 float64 时，.to(torch.float64) 返回的就是它本身）",
                                )
                            )
                    return {}

                with SPEC.diagnosing(check, sizes(args[0], args[1])):
                    check(kata)

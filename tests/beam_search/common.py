"""beam_search: what its tests share: the toy models, the float64 reference, the cases, the scenario.

PyTorch has no beam search, so `reference_search` below is a float64 rewrite, for one prompt,
of transformers' vectorized `GenerationMixin._beam_search` (4.50: `_get_top_k_continuations`,
`_get_running_beams_for_next_iteration`, `_update_finished_beams`,
`_beam_search_has_unfinished_sequences`), with HF's -1e9 slots, kept close to HF's code so
that it can be read beside it. Two properties check it and the kata from outside: one beam
with early_stopping=True is greedy decoding (`greedy`), and without pruning (V = 3, one of
them EOS, max_new_tokens = 3, num_beams = 15, early_stopping="never", length_penalty 0)
beam search returns all 15 complete hypotheses with their exact sums (`every_hypothesis`).

The model. `step_logprobs` is a deterministic toy (`toy_logprobs`): each sequence (prompt
included) hashes, with the model's seed, to its own generator, which draws the next token's
logits N(0, std^2); EOS gets a bias that depends on how many tokens were generated
(`eos_bias[i]` at the i-th new token, the last value repeating), then log_softmax, in
float64, rounded to the model's dtype. The kata process builds it from the model's
description (plain data) with functools.partial, so the kata and the reference call the same
function. Every decision the reference makes (the 2K-th candidate against the next, the K-th
finished hypothesis against the next, the stop heuristic) is kept MARGIN away from a tie: a
model seed whose search comes closer is passed over for the next one (`drawn`), so a float32
sum (HF's running scores are float32) never flips one, and hypotheses are compared exactly.

Tolerances (scores; measured over 100 seeds x every case, float32 and float64 models, on the
solution and both variants, hypotheses equal every time): every file sums in float64, so the
worst |error| / (atol + rtol |expected|) was 0 in float64 and 0 in float32 (the float32
model's log-probs are exact in float64). The tolerance is set for what the core tier must
accept: HF's own float32 running scores (measured the same way: worst fraction 0.017 against
(1e-5, 1e-5)) pass; so FLOAT32 = (1e-5, 1e-5) for both models in the core tier (see
FLOAT64_RULE), and the float64 rule's test holds float64 scores to FLOAT64_THROUGHOUT.
"""

from __future__ import annotations

import functools
import math

import torch

from judge.forbidden import BEAM_SEARCH
from judge.language import pick
from judge.testing.checks import Mismatch, call_repr
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tolerances import per_dtype

MOD = 2**61 - 1  # a Mersenne prime: the sequence hash stays below it
MARGIN = 1e-4  # every decision of the search is this far from a tie, in raw or normalized score
DEAD = -1.0e9  # HF's score of an empty slot
FLOAT64_THROUGHOUT = {"rtol": 1e-12, "atol": 1e-12}  # scores summed in float64: the rule's test
TOLERANCES = per_dtype(float64=(1e-12, 1e-12), float32=(1e-5, 1e-5))

# --------------------------------------------------------------------------- the toy model


def toy_logprobs(seqs: torch.Tensor, *, seed: int, V: int, eos: int, eos_bias: list, prompt_len: int,
                 std: list = (2.0,), dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Log-probabilities [n, V] of the next token of each row of seqs [n, t]: pure and deterministic.
    At the i-th new token the logits are N(0, std[i]^2) and EOS's gets eos_bias[i] (each list's
    last value repeating): a model flat at first and sure later, or EOS likely only early."""
    rows = []
    for row in seqs.tolist():
        h = seed
        for token in row:
            h = (h * 1_000_003 + token + 1) % MOD
        i = max(len(row) - prompt_len, 0)  # how many tokens were generated before this one
        logits = torch.randn(V, generator=torch.Generator().manual_seed(h), dtype=torch.float64)
        logits = logits * std[min(i, len(std) - 1)]
        logits[eos] += eos_bias[min(i, len(eos_bias) - 1)]
        rows.append(logits.log_softmax(-1))
    return torch.stack(rows).to(dtype=dtype, device=seqs.device)  # (n, V)


def model_of(case, seed: int, dtype: torch.dtype) -> dict:
    """The model's description (plain data): what toy_logprobs takes besides the sequences."""
    return {"seed": seed, "V": case["V"], "eos": case["eos"], "eos_bias": list(case["eos_bias"]),
            "prompt_len": case["P"], "std": list(case.get("std", [2.0])), "dtype": dtype}


def settings_of(case) -> dict:
    return {"num_beams": case["K"], "max_new_tokens": case["T"], "eos_token_id": case["eos"],
            "length_penalty": case["lp"], "early_stopping": case["early"]}


# --------------------------------------------------------------------------- the reference


def reference_search(model: dict, prompt: list[int], settings: dict):
    """(hypotheses, scores, margin): HF's _beam_search for batch 1, in float64. margin: how close
    the closest decision came to a tie (the smallest gap between two compared real scores)."""
    K, T = settings["num_beams"], settings["max_new_tokens"]
    eos, lp, early = settings["eos_token_id"], settings["length_penalty"], settings["early_stopping"]
    P = len(prompt)
    top_num_beam_mask = torch.tensor([True] * K + [False] * K)
    running_sequences = [list(prompt) for _ in range(K)]
    running_beam_scores = torch.full((K,), DEAD, dtype=torch.float64)
    running_beam_scores[0] = 0.0
    sequences = [list(prompt) for _ in range(K)]
    beam_scores = torch.full((K,), DEAD, dtype=torch.float64)
    is_sent_finished = torch.zeros(K, dtype=torch.bool)
    margin = math.inf
    for t in range(T):
        log_probs = toy_logprobs(torch.tensor(running_sequences), **model).double()  # (K, V)
        V = log_probs.size(-1)
        accumulated = (log_probs + running_beam_scores[:, None]).reshape(-1)  # (K*V,)
        margin = min(margin, _gap(accumulated.sort(descending=True).values[: 2 * K + 1]))
        # _get_top_k_continuations
        topk_log_probs, topk_indices = torch.topk(accumulated, 2 * K)
        topk_sequences = [running_sequences[i // V] + [i % V] for i in topk_indices.tolist()]
        hits = torch.tensor([s[-1] == eos or t == T - 1 for s in topk_sequences])  # EOS or max length
        # _get_running_beams_for_next_iteration
        topk_running_log_probs = topk_log_probs + hits.double() * DEAD
        next_topk = torch.topk(topk_running_log_probs, K).indices.tolist()
        running_sequences = [topk_sequences[i] for i in next_topk]
        running_beam_scores = topk_running_log_probs[next_topk]
        # _update_finished_beams
        just_finished = hits & top_num_beam_mask
        normalized = topk_log_probs / (t + 1) ** lp
        normalized = normalized + float(bool(is_sent_finished.all()) and early is True) * DEAD
        normalized = normalized + (~just_finished).double() * DEAD
        merged_scores = torch.cat([beam_scores, normalized])
        merged_sequences = sequences + topk_sequences
        merged_finished = torch.cat([is_sent_finished, just_finished])
        margin = min(margin, _gap(merged_scores.sort(descending=True).values[: K + 1]))
        keep = torch.topk(merged_scores, K).indices.tolist()
        sequences = [merged_sequences[i] for i in keep]
        beam_scores, is_sent_finished = merged_scores[keep], merged_finished[keep]
        # _beam_search_has_unfinished_sequences
        length = T if early == "never" and lp > 0 else t + 1
        best_possible = running_beam_scores[0] / length**lp
        worst_finished = torch.where(is_sent_finished, beam_scores.min(), torch.tensor(DEAD, dtype=torch.float64))
        if best_possible > DEAD / 2 and bool(is_sent_finished.all()):
            margin = min(margin, abs(float(best_possible - worst_finished[0])))
        improvement_possible = bool((best_possible > worst_finished).any())
        exists_open_beam = not (bool(is_sent_finished.all()) and early is True)
        valid_continuations = not bool(hits.all())
        if not (improvement_possible and exists_open_beam and valid_continuations):
            break
    return [s[P:] for s in sequences], beam_scores.tolist(), margin


def _gap(values: torch.Tensor) -> float:
    """The smallest gap between two adjacent real scores of a sorted list (HF's dead slots left out)."""
    real = values[values > DEAD / 2]
    return float(real.diff().abs().min()) if real.numel() > 1 else math.inf


def greedy(model: dict, prompt: list[int], max_new_tokens: int, eos: int, lp: float):
    """([hypothesis], [score], margin): the argmax at each step until EOS or the length."""
    seq, total, margin = list(prompt), 0.0, math.inf
    for _ in range(max_new_tokens):
        logp = toy_logprobs(torch.tensor([seq]), **model).double()[0]
        best = logp.topk(2).values
        margin = min(margin, float(best[0] - best[1]))
        seq.append(int(logp.argmax()))
        total += float(logp[seq[-1]])
        if seq[-1] == eos:
            break
    hypothesis = seq[len(prompt):]
    return [hypothesis], [total / len(hypothesis) ** lp], margin


def every_hypothesis(model: dict, prompt: list[int], max_new_tokens: int, eos: int):
    """Every complete hypothesis (ended by EOS, or by the length) with its plain sum, best first."""
    found = []

    def grow(seq, total):
        logp = toy_logprobs(torch.tensor([seq]), **model).double()[0]
        for v in range(logp.numel()):
            new, score = seq + [v], total + float(logp[v])
            if v == eos or len(new) - len(prompt) == max_new_tokens:
                found.append((score, new[len(prompt):]))
            else:
                grow(new, score)

    grow(list(prompt), 0.0)
    found.sort(key=lambda f: f[0], reverse=True)
    scores = [s for s, _ in found]
    margin = min((a - b for a, b in zip(scores, scores[1:])), default=math.inf)
    return [h for _, h in found], scores, margin


def drawn(gen_seed: int, case, dtype: torch.dtype, expected=None):
    """(model, prompt, (hypotheses, scores)) for a case: the first model seed from gen_seed on
    whose search keeps every decision MARGIN from a tie. `expected(model, prompt)` gives
    (hypotheses, scores, margin); the reference beam search by default."""
    expected = expected or (lambda model, prompt: reference_search(model, prompt, settings_of(case)))
    prompt_gen = torch.Generator().manual_seed(gen_seed)
    prompt = torch.randint(0, case["V"], (case["P"],), generator=prompt_gen).tolist()
    for seed in range(gen_seed, gen_seed + 200):
        model = model_of(case, seed, dtype)
        hypotheses, scores, margin = expected(model, prompt)
        if margin >= MARGIN:
            return model, torch.tensor(prompt), (hypotheses, scores)
    raise RuntimeError("no model without near ties")  # never: a near tie is rare


# --------------------------------------------------------------------------- cases

# Sizes: P (prompt length), V, K (num_beams), T (max_new_tokens), eos (its id), eos_bias (added to
# EOS's logit at the i-th new token, the last value repeating), lp (length_penalty), early, and std
# (the logits' spread at the i-th new token, 2.0 by default: small is flat, large is sure).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("EOS dominates: the 2K backup keeps num_beams beams running", "EOS 占优：2K 个后备候选保证仍有 num_beams 条束在运行",
         P=2, V=9, K=3, T=5, eos=0, eos_bias=[2.5], lp=1.0, early=False),
    edge("EOS likely on the first two steps, early_stopping=True", "前两步 EOS 都很可能出现，early_stopping=True",
         P=3, V=7, K=4, T=7, eos=0, eos_bias=[3.7, 2.2], lp=2.0, early=True, std=[2.7]),
    edge("EOS likely at every step, early_stopping=True, four beams", "每一步 EOS 都很可能出现，early_stopping=True，四条束",
         P=2, V=8, K=4, T=6, eos=5, eos_bias=[3.0], lp=1.0, early=True, std=[3.0]),
    edge("length penalty 2, early_stopping never (the heuristic uses max_new_tokens): EOS likely early",
         "length_penalty 为 2，early_stopping 为 never（启发式用 max_new_tokens）：EOS 早期很可能出现",
         P=1, V=9, K=2, T=6, eos=0, eos_bias=[1.5, 4.0, -30.0], lp=2.0, early="never", std=[0.5, 0.5, 4.0]),
    edge("every beam's best candidate is EOS at step 2: only the backup runs on",
         "第 2 步每条束的最佳候选都是 EOS：只有后备候选能继续运行",
         P=2, V=9, K=2, T=6, eos=0, eos_bias=[-30.0, 8.0, -30.0], lp=2.0, early="never", std=[0.5, 0.5, 4.0]),
    edge("length penalty 2, early_stopping never, a flat start", "length_penalty 为 2，early_stopping 为 never，开头分布平坦",
         P=3, V=9, K=2, T=6, eos=8, eos_bias=[2.7], lp=2.0, early="never", std=[0.5, 1.4]),
    edge("EOS on the first step", "第一步就生成 EOS",
         P=3, V=7, K=2, T=4, eos=6, eos_bias=[3.5, -1.0], lp=1.0, early=True),
    edge("length penalty -1 favours short hypotheses", "length_penalty 为 -1，偏向短的假设",
         P=1, V=8, K=3, T=5, eos=3, eos_bias=[0.5], lp=-1.0, early=False),
    edge("length penalty 0: plain sums", "length_penalty 为 0：直接求和",
         P=2, V=8, K=3, T=5, eos=2, eos_bias=[1.0], lp=0.0, early="never"),
    edge("max_new_tokens = 1: every candidate ends at once", "max_new_tokens = 1：所有候选同时结束",
         P=2, V=6, K=3, T=1, eos=0, eos_bias=[0.0], lp=1.0, early=True),
    edge("EOS never likely: every hypothesis ends by length", "EOS 几乎不可能：所有假设都因长度而结束",
         P=2, V=6, K=3, T=4, eos=5, eos_bias=[-30.0], lp=1.0, early=True),
    edge("one beam, one-token prompt", "只有一条束，prompt 只有一个 token",
         P=1, V=5, K=1, T=6, eos=4, eos_bias=[0.3], lp=1.0, early=False),
)
# fmt: on


def hidden_cases(rng, count: int) -> list[dict]:
    """Random sizes, V > num_beams always (HF's dead slots never surface); every setting at random."""
    cases = []
    for _ in range(count):
        K = rng.randrange(1, 5)
        V = rng.randrange(K + 1, 13)
        cases.append({
            "P": rng.randrange(1, 5), "V": V, "K": K, "T": rng.randrange(1, 8), "eos": rng.randrange(V),
            "eos_bias": [rng.choice([-3.0, 0.0, 0.5, 1.5, 2.5])],
            "lp": rng.choice([1.0, 1.0, 0.0, 0.5, 2.0, -1.0]), "early": rng.choice([True, False, "never"]),
        })
    return cases


def benchmark(kata, device):
    """(kata call, reference call): V = 2000, num_beams 8, max_new_tokens 24, one prompt of 8
    tokens, the toy model in float32; the reference is the test's float64 rewrite of HF's."""
    case = {"P": 8, "V": 2000, "K": 8, "T": 24, "eos": 0, "eos_bias": [0.0], "lp": 1.0, "early": "never"}
    model, prompt = model_of(case, 7, torch.float32), list(range(1, 9))
    step = functools.partial(toy_logprobs, **model)
    tokens = torch.tensor(prompt, device=device)
    return (
        lambda: kata.beam_search(step, tokens, **settings_of(case)),
        lambda: reference_search(model, prompt, settings_of(case)),
    )


SPEC = KataSpec(
    kata="beam_search",
    symbol="beam_search",
    reference=(
        "a float64 rewrite of transformers' vectorized `GenerationMixin._beam_search` (4.50) for one "
        "prompt, on deterministic toy models; properties: one beam is greedy, and without pruning all "
        "15 hypotheses come back with their exact sums"
    ),
    forbidden=BEAM_SEARCH,
    tolerances=TOLERANCES,
    tolerance_note=(
        "scores; hypotheses exactly. Measured over 100 seeds, the solution and two variants: worst "
        "fraction 0 (every file sums in float64); HF's code glued as it is (float32 running scores): "
        "0.017 of float32's"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=4),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- the scenario and checks


def form_of(value) -> str:
    """How a value is built, in Python types: 'tuple(list[list[int]], list[float])'."""
    if isinstance(value, (tuple, list)):
        inner = sorted({form_of(v) for v in value})
        return f"{type(value).__name__}({', '.join(inner)})" if isinstance(value, tuple) else f"list[{'|'.join(inner)}]"
    return type(value).__name__ if not isinstance(value, torch.Tensor) else f"Tensor({str(value.dtype)[6:]})"


PLAIN = {"tuple(list[float], list[list[int]])", "tuple(list[list[int]], list[float])"}


@scenario
def searched(kata, model: dict, prompt, settings: dict) -> dict:
    """kata.beam_search(<the toy model>, prompt, **settings): its hypotheses (lists of ints),
    its scores (float64 [K]), how its result is built, and the prompt after the call."""
    step = functools.partial(toy_logprobs, **model)
    result = kata.beam_search(step, prompt, **settings)
    out = {"form": form_of(result), "prompt": prompt, "hypotheses": None, "scores": None}
    try:
        hypotheses, scores = result
        out["hypotheses"] = [[int(token) for token in h] for h in hypotheses]
        out["scores"] = torch.tensor([float(s) for s in scores], dtype=torch.float64)
    except (TypeError, ValueError):  # not a pair of sequences: the form says what it is
        pass
    return out


def call_text(prompt, settings) -> str:
    return call_repr("beam_search", "step_logprobs", prompt, **settings)


def search_sizes(case) -> dict:
    return {k: v for k, v in case.items() if isinstance(v, int) and not isinstance(v, bool)}


def check_search(got: dict, expected, *, call: str, tolerance: dict) -> None:
    """The hypotheses exactly (their number, then rank by rank), then the scores within tolerance."""
    hypotheses, scores = expected
    if got["hypotheses"] is None:
        raise AssertionError(pick(
            f"{call} returned {got['form']}; expected a pair (hypotheses, scores): a list of token lists and a "
            "list of floats",
            f"{call} 返回了 {got['form']}；应返回一对 (hypotheses, scores)：token 列表的列表，以及浮点数列表",
        ))
    mine = got["hypotheses"]
    if mine != hypotheses:
        if len(mine) != len(hypotheses):
            head = pick(f"{len(mine)} hypotheses, expected {len(hypotheses)} (num_beams)",
                        f"{len(mine)} 个假设，期望 {len(hypotheses)} 个（num_beams）")
        else:
            r = next(i for i, (a, b) in enumerate(zip(mine, hypotheses)) if a != b)
            elsewhere = pick(" (it is expected, at another rank)", "（它在期望结果中，但名次不同）") if mine[r] in hypotheses else ""
            head = pick(f"rank {r} is {mine[r]}{elsewhere}, expected {hypotheses[r]} with score {scores[r]:.6g}",
                        f"第 {r} 名是 {mine[r]}{elsewhere}，期望 {hypotheses[r]}（分数 {scores[r]:.6g}）")
        raise Mismatch(
            pick(f"{call} returned wrong hypotheses: {head}. Got {_short(mine)}, expected {_short(hypotheses)} "
                 f"with scores {[round(s, 4) for s in scores]}",
                 f"{call} 返回的假设不对：{head}。得到 {_short(mine)}，期望 {_short(hypotheses)}，"
                 f"分数 {[round(s, 4) for s in scores]}"),
            what="hypotheses", actual=mine, expected=hypotheses,
        )
    SPEC.assert_close(got["scores"], torch.tensor(scores, dtype=torch.float64), call=call, what="scores",
                      tolerance=tolerance)


def _short(hypotheses) -> str:
    text = repr(hypotheses)
    return text if len(text) <= 300 else text[:300] + " ..."


def judge_search(kata, model, prompt, settings, expected, *, sizes, tolerance) -> None:
    """Run the search where the kata lives and check it, diagnosed by replaying the known slips."""
    call = call_text(prompt, settings)

    def replay(implementation) -> dict:
        return searched(implementation, model, prompt, settings)

    with SPEC.diagnosing(replay, sizes):
        check_search(replay(kata), expected, call=call, tolerance=tolerance)

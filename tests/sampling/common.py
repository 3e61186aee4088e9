"""sampling: what its tests share: the SPEC, the float64 reference, the cases, the scenarios.

filter_logits is judged against an independent float64 formulation; sample_next_token by its draws.

PyTorch has no temperature, top-k or top-p filter, so `reference_filter` below is an
independent float64 formulation of Hugging Face's TemperatureLogitsWarper, TopKLogitsWarper
and TopPLogitsWarper, in that order, written without sorting: a token's rank is how many
tokens score above it, and top-p looks at the total probability of the tokens scoring
above it (`before`): it survives while that is below top_p (so the token that crosses
top_p stays), or while its rank is below min_tokens_to_keep. The filter's survivors are
compared exactly (which tokens are -inf), then the kept values (logits / temperature) with
PyTorch's single-op tolerances: a division is all the arithmetic they see.

Inputs: random logits without ties (a value that rounds onto another in the dtype under
test moves up by one ulp), some rows with tokens already -inf; every row is redrawn until
top_p lies at least MARGIN = 2e-3 from each token's `before`, where rounding alone would
decide (so "reaches top_p" is never judged at exact equality).

sample_next_token is judged by its draws: argmax at temperature 0; and, on fixed seeds, the
frequencies of 4000 draws within 5 standard errors of the filtered distribution, rows
independent of each other; no removed token in thousands of draws; the global RNG left
untouched; the same generator state giving the same tokens (another state other tokens).
A generator is no data: the scenarios below are given its seed and make it where the kata
runs, and what concerns the global RNG is observed there too (its state before and after
the call), returned as data. Each sampling check is a function of the implementation that
runs the scenario and raises the same message for the same draws, so the diagnosis replays
the known slips through it.

Tolerances (measured over 100 seeds x every case of the table x the four dtypes, on the
solution and both variants; the kept sets matched exactly every time): the kept values are
one division by the temperature, so PyTorch's single-op tolerances (SINGLE_OP); the worst
|error| / (atol + rtol |expected|) against the float64 reference rounded to the dtype was
0.06 in float32, 0 in float64, 0.14 in float16 and 0.12 in bfloat16 (float32 math rounded
once to the half dtype). The core tier judges float64 results with float32's (see
FLOAT64_RULE); the float64 rule's test holds them to FLOAT64_THROUGHOUT, far tighter than
SINGLE_OP's float64 one (1e-7, which a float32 step, 6e-8 per rounding, would pass): one
division in float64 is off by an ulp at most.
"""

from __future__ import annotations

import torch

from judge.forbidden import NONE
from judge.language import pick
from judge.testing.checks import (
    Mismatch,
    assert_close,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.functions import FunctionKata, assert_inputs_unchanged
from judge.testing.inputs import randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, KataSpec, edge
from judge.testing.tolerances import SINGLE_OP

FULL = (torch.float32, torch.float64)
HALF = (torch.float16, torch.bfloat16)
MARGIN = 2e-3  # top_p is kept this far from every token's `before`: rounding decides closer in
NEG_INF = float("-inf")
FLOAT64_THROUGHOUT = {"rtol": 1e-12, "atol": 1e-12}  # float64 computed in float64: the rule's test

# --------------------------------------------------------------------------- the reference


def reference_filter(logits: torch.Tensor, *, temperature=1.0, top_k=0, top_p=1.0, min_tokens_to_keep=1):
    """(filtered scores in float64 on the CPU, {rank, before}): Hugging Face's three warpers
    written without sorting. rank[i]: how many tokens score above token i (0 = the most
    likely); before[i]: the probability (after temperature and top-k) of those tokens."""
    scores = logits.detach().to("cpu", torch.float64) / temperature  # (..., V)
    above = scores.unsqueeze(-2) > scores.unsqueeze(-1)  # (..., V, V): [i, j] = token j scores above token i
    rank = above.sum(-1)  # (..., V)
    floor = max(min_tokens_to_keep, 1)
    if top_k > 0:
        scores = scores.masked_fill(rank >= max(top_k, floor), NEG_INF)
    weights = (scores - scores.amax(-1, keepdim=True)).exp()  # -inf -> 0
    probs = weights / weights.sum(-1, keepdim=True)
    before = (above * probs.unsqueeze(-2)).sum(-1)  # (..., V)
    if top_p < 1.0:
        scores = scores.masked_fill((before >= top_p) & (rank >= floor), NEG_INF)
    return scores, {"rank": rank, "before": before, "probs": probs}


# --------------------------------------------------------------------------- cases

# Sizes: lead (leading dims), V, temperature, top_k, top_p (a number, or "halfway past the
# top token": halfway between the top token's probability and the top two's, after
# temperature and top-k), min_keep (min_tokens_to_keep), banned (tokens already -inf per row).
# fmt: off
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    # top-p must see the probabilities left by top-k, after the temperature: the order slips,
    # the crossing token and top-k's off-by-ones all show here, each differently
    edge("top-k then top-p, both biting, temperature 1.6", "先 top-k 再 top-p，两者都起作用，temperature 1.6",
         lead=[32], V=12, temperature=1.6, top_k=5, top_p=0.7, min_keep=1, banned=0),
    edge("top_k = 1 keeps the argmax alone", "top_k = 1 只保留 argmax",
         lead=[5], V=9, temperature=0.8, top_k=1, top_p=1.0, min_keep=1, banned=0),
    edge("top_p halfway between two tokens' cumulative mass: the crossing token stays",
         "top_p 落在两个 token 的累积概率之间：越过 top_p 的那个 token 保留",
         lead=[], V=7, temperature=0.9, top_k=0, top_p="halfway past the top token", min_keep=1, banned=0),
    edge("min_tokens_to_keep = 3 outvotes top_k = 1 and top_p = 0.2",
         "min_tokens_to_keep = 3 优先于 top_k = 1 和 top_p = 0.2",
         lead=[4], V=10, temperature=0.7, top_k=1, top_p=0.2, min_keep=3, banned=0),
    edge("three tokens already -inf per row, top_k past the finite ones",
         "每行已有三个 token 为 -inf，top_k 超过有限值 token 的个数",
         lead=[4], V=8, temperature=1.2, top_k=6, top_p=0.9, min_keep=1, banned=3),
    edge("top_k > V keeps every token", "top_k > V 时保留所有 token",
         lead=[3], V=6, temperature=1.3, top_k=9, top_p=1.0, min_keep=1, banned=0),
    edge("V = 1", "V = 1（只有一个 token）",
         lead=[3], V=1, temperature=0.7, top_k=1, top_p=0.5, min_keep=1, banned=0),
    edge("[V] alone, top_k = 0 and top_p = 1.0: the temperature only",
         "只有 [V]，top_k = 0 且 top_p = 1.0：只有 temperature 起作用",
         lead=[], V=11, temperature=2.5, top_k=0, top_p=1.0, min_keep=1, banned=0),
    edge("[A, B, V], min_tokens_to_keep = 2", "形状为 [A, B, V]，min_tokens_to_keep = 2",
         lead=[2, 3], V=13, temperature=0.8, top_k=7, top_p=0.85, min_keep=2, banned=0),
)
# fmt: on


def hidden_cases(rng, count: int) -> list[dict]:
    """Leading dims (none, [B] or [A, B]) and V, all different; every filter on or off at random."""
    cases = []
    for _ in range(count):
        n_lead = rng.choice([0, 1, 1, 2])
        sizes = rng.sample(range(2, 9), n_lead) + [rng.randrange(9, 65)]
        V = sizes[-1]
        cases.append(
            {
                "lead": sizes[:n_lead],
                "V": V,
                "temperature": round(rng.uniform(0.3, 2.5), 2),
                "top_k": rng.choice([0, rng.randrange(1, V + 4), rng.randrange(2, 12)]),
                "top_p": rng.choice([1.0, round(rng.uniform(0.2, 0.97), 3)]),
                "min_keep": rng.choice([1, 1, 1, rng.randrange(2, 5)]),
                "banned": rng.choice([0, 0, 0, rng.randrange(1, V // 2)]),
            }
        )
    return cases


def filters(case) -> dict:
    """The keyword arguments of a case (top_p still possibly a description)."""
    return {
        "temperature": case["temperature"],
        "top_k": case["top_k"],
        "top_p": case["top_p"],
        "min_tokens_to_keep": case["min_keep"],
    }


def draw_logits(gen, shape, dtype, *, banned=0, std=2.0) -> torch.Tensor:
    """Random logits N(0, std^2) rounded to `dtype`, `banned` random tokens per row already -inf,
    and no ties: a value that rounds onto another's moves up by one ulp of the dtype."""
    V = shape[-1]
    rows = randn(gen, *shape, dtype=torch.float64, std=std).to(dtype).reshape(-1, V)
    if banned:
        for row in rows:
            row[torch.randperm(V, generator=gen)[:banned]] = NEG_INF
    for _ in range(V):
        ordered, order = rows.sort(-1)
        tied = (ordered.diff(dim=-1) == 0) & torch.isfinite(ordered[:, 1:])
        if not tied.any():
            return rows.reshape(shape)
        bump = torch.zeros(rows.shape, dtype=torch.bool).scatter(-1, order[:, 1:], tied)  # the upper one of each tie
        up = torch.nextafter(rows, torch.full_like(rows, float("inf")))
        rows = torch.where(bump, up, rows)
    raise RuntimeError("could not draw logits without ties")  # never: each pass resolves one tie per run


def _undecided_rows(logits, kwargs) -> torch.Tensor:
    """[rows] bool: where some token after top-k is within MARGIN of the top-p threshold."""
    V, top_p = logits.size(-1), kwargs.get("top_p", 1.0)
    if top_p >= 1.0:
        return torch.zeros(logits.numel() // max(V, 1), dtype=torch.bool)
    after_top_k, info = reference_filter(logits, **{**kwargs, "top_p": 1.0})
    floor = max(kwargs.get("min_tokens_to_keep", 1), 1)
    judged = torch.isfinite(after_top_k) & (info["rank"] >= floor)
    close = ((info["before"] - top_p).abs() < MARGIN) & judged
    return close.reshape(-1, V).any(-1)


def top_p_is_decided(logits, top_p=1.0, **kwargs) -> bool:
    """Whether every token after top-k is at least MARGIN from the top-p threshold."""
    return not bool(_undecided_rows(logits, {**kwargs, "top_p": top_p}).any())


def make_inputs(gen, case, dtype, device="cpu"):
    """(logits, keyword arguments) for a case: top_p resolved, and every row redrawn until its
    tokens are MARGIN away from the top-p threshold."""
    kwargs, shape, banned = filters(case), [*case["lead"], case["V"]], case["banned"]
    for _ in range(200):
        logits = draw_logits(gen, shape, dtype, banned=banned)
        if case["top_p"] == "halfway past the top token":
            _, info = reference_filter(logits, **{**kwargs, "top_p": 1.0})
            first = info["probs"].reshape(-1, case["V"])[0].sort(descending=True).values
            kwargs["top_p"] = round(float(first[0] + first[1] / 2), 6)  # the top token falls short, the second crosses
            if kwargs["top_p"] >= 1.0 - MARGIN:
                continue
        rows = logits.reshape(-1, case["V"])
        for _ in range(200 if case["top_p"] != "halfway past the top token" else 1):
            undecided = _undecided_rows(rows, kwargs)
            if not undecided.any():
                return rows.reshape(shape).to(device), kwargs
            rows[undecided] = draw_logits(gen, [int(undecided.sum()), case["V"]], dtype, banned=banned)
    raise RuntimeError("could not keep top_p away from the cumulative probabilities")  # never


# --------------------------------------------------------------------------- benchmark


def benchmark(kata, device):
    """(kata call, reference call) at a realistic size: 16 rows of a 32000-token vocabulary
    (Llama's), temperature 0.7, top_k 50, top_p 0.9, float32. The reference is the float32
    code of Hugging Face's three warpers (top-p on an ascending sort)."""
    gen = torch.Generator().manual_seed(0)
    logits = randn(gen, 16, 32000, std=3.0, device=device)

    def reference_call():
        scores = logits / 0.7
        kth = torch.topk(scores, 50)[0][..., -1, None]
        scores = scores.masked_fill(scores < kth, NEG_INF)
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - 0.9)
        sorted_indices_to_remove[..., -1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        return scores.masked_fill(indices_to_remove, NEG_INF)

    return (lambda: kata.filter_logits(logits, temperature=0.7, top_k=50, top_p=0.9)), reference_call


SPEC = KataSpec(
    kata="sampling",
    symbol="filter_logits",
    reference=(
        "an independent float64 formulation of Hugging Face's temperature, top-k and top-p warpers "
        "(ranks and the probability above each token, no sorting); sample_next_token by the frequencies of its draws"
    ),
    forbidden=NONE,  # PyTorch has no such filter: topk, sort, softmax and multinomial are all allowed
    also={"sample_next_token": NONE},
    tolerances=SINGLE_OP,
    tolerance_note=(
        "the kept values are one division by the temperature: PyTorch's single-op tolerances, "
        "solution and variants measured at most 0.14 of them; which tokens survive is compared exactly, "
        "top_p kept 2e-3 from every cumulative probability"
    ),
    cases=CaseTable(draw=hidden_cases, edges=EDGES, draws=4),
    benchmark=benchmark,
)


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


def generator_at(seed: int, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@scenario
def sampled(kata, logits, seed: int, kwargs: dict, generator_device: str = "cpu") -> dict:
    """kata.sample_next_token(logits, generator=<a generator seeded `seed`>, **kwargs): its
    tokens, the logits as the call left them, and whether the call moved the global RNG
    (torch.get_rng_state() compared before and after it, here)."""
    generator = generator_at(seed, generator_device)
    before = torch.get_rng_state()
    tokens = kata.sample_next_token(logits, generator=generator, **kwargs)
    return {"tokens": tokens, "logits": logits, "global rng moved": not torch.equal(torch.get_rng_state(), before)}


@scenario
def sampled_from_two_states(kata, logits, seed: int, kwargs: dict) -> dict:
    """The story of one generator: a call, the generator set back to the state it had before
    it, the same call again; then the call with a generator seeded `seed + 1`."""
    generator = generator_at(seed)
    state = generator.get_state()
    first = kata.sample_next_token(logits.clone(), generator=generator, **kwargs)
    generator.set_state(state)
    again = kata.sample_next_token(logits.clone(), generator=generator, **kwargs)
    other = kata.sample_next_token(logits.clone(), generator=generator_at(seed + 1), **kwargs)
    return {"first": first, "again": again, "other": other}


@scenario
def sampling_raised(kata, logits, seed: int, kwargs: dict) -> dict:
    """What kata.sample_next_token(logits, generator=..., **kwargs) raised (its class and base
    classes' names), or what it returned."""
    try:
        tokens = kata.sample_next_token(logits, generator=generator_at(seed), **kwargs)
    except NotImplementedError:  # the stub: its own verdict
        raise
    except Exception as error:  # noqa: BLE001 - the judge decides what was expected
        return {"raised": [cls.__name__ for cls in type(error).__mro__], "message": str(error)}
    return {"returned": tokens}


# --------------------------------------------------------------------------- filter_logits: calls and checks


def filter_outputs(result, text: str) -> dict:
    """The result, and which tokens it kept (for the diagnosis of a wrong kept set)."""
    kept = result != NEG_INF if isinstance(result, torch.Tensor) else result
    return {"result": result, "kept tokens": kept}


FILTER = FunctionKata(SPEC, outputs={"filter_logits": filter_outputs}, parameters={"filter_logits": ("logits",)})


def filter_sizes(logits, kwargs) -> dict:
    return {"V": logits.size(-1), **{k: v for k, v in kwargs.items() if isinstance(v, int) and not isinstance(v, bool)}}


def _row_story(got_kept, want_kept, info, row, kwargs) -> str:
    """One row: the tokens kept and expected, most likely first, and the first token that
    differs with its rank, probability and the probability before it."""
    rank = info["rank"][row]
    order = rank.argsort().tolist()  # token ids, most likely first
    got = [j for j in order if got_kept[row][j]]
    want = [j for j in order if want_kept[row][j]]
    wrong = next(j for j in order if bool(got_kept[row][j]) != bool(want_kept[row][j]))
    where = (
        pick("the row", "该行")
        if not row
        else pick(f"row {row[0]}", f"第 {row[0]} 行")
        if len(row) == 1
        else pick(f"row {row}", f"行 {row}")
    )

    def listed(tokens):
        return f"{tokens[:12]}{' ...' if len(tokens) > 12 else ''}"

    text = pick(
        f"in {where} it kept {len(got)} token{'s' * (len(got) != 1)}, expected {len(want)}; "
        f"tokens from the most likely down: kept {listed(got)}, expected {listed(want)}. "
        f"Token {wrong} (rank {int(rank[wrong])}, 0 = the most likely",
        f"在{where}中保留了 {len(got)} 个 token，应为 {len(want)} 个；"
        f"按可能性从高到低：保留了 {listed(got)}，应为 {listed(want)}。"
        f"token {wrong}（排名 {int(rank[wrong])}，0 = 最可能",
    )
    if kwargs.get("top_p", 1.0) < 1.0:
        text += pick(
            f"; probability {float(info['probs'][row][wrong]):.4g} after temperature and top-k, "
            f"{float(info['before'][row][wrong]):.4g} on the tokens above it, top_p = {kwargs['top_p']:g}",
            f"；经过 temperature 和 top-k 后概率为 {float(info['probs'][row][wrong]):.4g}，"
            f"排在它前面的 token 概率之和为 {float(info['before'][row][wrong]):.4g}，top_p = {kwargs['top_p']:g}",
        )
    if int(rank[wrong]) < kwargs.get("min_tokens_to_keep", 1):
        text += pick(
            f"; among the min_tokens_to_keep = {kwargs['min_tokens_to_keep']} most likely, which always stay",
            f"；它属于最可能的 min_tokens_to_keep = {kwargs['min_tokens_to_keep']} 个 token，这些总要保留",
        )
    if got_kept[row][wrong]:
        return pick(f"{text}) was kept but should be removed (-inf)", f"{text}）被保留了，但应被移除（-inf）")
    return pick(f"{text}) was removed but should be kept", f"{text}）被移除了，但应被保留")


def check_kept(got, want, info, *, call, kwargs) -> None:
    """Which tokens survive (are not -inf), exactly; the message tells one row's story."""
    got_kept, want_kept = (got != NEG_INF).cpu(), (want != NEG_INF).cpu()
    if torch.equal(got_kept, want_kept):
        return
    rows = (got_kept != want_kept).any(-1)
    first = tuple(int(i) for i in rows.nonzero()[0]) if rows.dim() else ()
    story = _row_story(got_kept, want_kept, info, first, kwargs)
    message = pick(
        f"{call} kept the wrong tokens in {int(rows.sum())} of {rows.numel()} rows: {story}",
        f"{call} 在 {rows.numel()} 行中有 {int(rows.sum())} 行保留的 token 不对：{story}",
    )
    raise Mismatch(message, what="kept tokens", actual=got_kept, expected=want_kept)


def judge_filter(got, want, info, *, call, kwargs, tolerance=None) -> None:
    """The result's kind, then which tokens it kept, exactly, then the kept values (the
    removed ones, -inf in both, read as 0: a message then names a kept value that is off)."""
    check_tensor_kind(got, want, call=call, what="result")
    check_kept(got, want, info, call=call, kwargs=kwargs)
    removed = want == NEG_INF

    def kept_values(result):
        return result.masked_fill(removed.to(result.device), 0) if result.shape == removed.shape else result

    tolerance = tolerance or SPEC.tolerance(want.dtype)
    got, want = kept_values(got), kept_values(want)
    assert_close(got, want, call=call, what="result", tolerance=tolerance, project=kept_values)


def check_filter(kata, logits, *, tolerance=None, **kwargs) -> None:
    """filter_logits(logits, **kwargs) against the float64 reference rounded to the logits' dtype
    (compared with the core tier's tolerance unless one is given)."""
    want, info = reference_filter(logits, **kwargs)
    want = want.to(dtype=logits.dtype, device=logits.device)
    with FILTER.judging(kata, logits, sizes=filter_sizes(logits, kwargs), **kwargs) as call:
        judge_filter(call["result"], want, info, call=call.text, kwargs=kwargs, tolerance=tolerance)


# --------------------------------------------------------------------------- sample_next_token: calls and checks


def sample_text(logits, kwargs) -> str:
    return call_repr("sample_next_token", logits, generator="<torch.Generator>", **kwargs)


def sample(implementation, logits, seed: int, kwargs: dict, *, generator_device="cpu", kind=True):
    """(call, tokens, what the scenario saw) of sample_next_token on a generator seeded `seed`;
    unless `kind` is False, the tokens' type, dtype, shape and device checked (int64 [B])."""
    call = sample_text(logits, kwargs)
    got = sampled(implementation, logits, seed, kwargs, generator_device)
    if kind:
        expected = torch.empty(logits.shape[:-1], dtype=torch.int64, device=logits.device)
        check_tensor_kind(got["tokens"], expected, call=call, what="tokens")
    return call, got["tokens"], got


def kept_tokens(logits, **kwargs) -> torch.Tensor:
    """[B, V] bool: the tokens sample_next_token may draw (filter_logits with min_tokens_to_keep 1)."""
    return reference_filter(logits, **kwargs)[0] != NEG_INF


def repeated_rows(gen, rows: int, V: int, copies: int, *, banned=0, std=2.0, dtype=torch.float32):
    """([rows * copies, V] logits: `rows` distinct rows interleaved, row i at i, i + rows, ...; the rows)."""
    distinct = draw_logits(gen, [rows, V], dtype, banned=banned, std=std)
    return distinct.repeat(copies, 1), distinct


def sampling_sizes(logits, kwargs) -> dict:
    return {"B": logits.size(0), "V": logits.size(-1)}


def check_never_draws_a_removed_token(kata, gen, rng, dtype) -> None:
    """2400 draws from 6 distinct rows (two with tokens already -inf): none outside the filters."""
    V = rng.randrange(10, 20)
    logits, _ = repeated_rows(gen, 6, V, 400, dtype=dtype)
    logits[1::3, torch.randperm(V, generator=gen)[:3]] = NEG_INF  # rows 1 and 4 of the six
    kwargs = {"temperature": 0.9, "top_k": rng.randrange(4, V - 2), "top_p": 0.75}
    while not top_p_is_decided(logits[:6], **kwargs, min_tokens_to_keep=1):
        kwargs["top_p"] = round(rng.uniform(0.5, 0.95), 3)
    allowed = kept_tokens(logits, **kwargs)
    seed = rng.randrange(2**31)

    def check(implementation) -> dict:
        call, tokens, _ = sample(implementation, logits, seed, kwargs)
        tokens = tokens.cpu()
        if ((tokens < 0) | (tokens >= V)).any():
            row = int(((tokens < 0) | (tokens >= V)).nonzero()[0])
            raise AssertionError(
                pick(
                    f"{call} returned token {int(tokens[row])} in row {row}: ids run from 0 to V - 1 = {V - 1}",
                    f"{call} 在第 {row} 行返回了 token {int(tokens[row])}：token id 的范围是 0 到 V - 1 = {V - 1}",
                )
            )
        bad = ~allowed.gather(-1, tokens[:, None]).squeeze(-1)
        if bad.any():
            row = int(bad.nonzero()[0])
            token = int(tokens[row])
            why = (
                pick("it is -inf in the logits", "它在 logits 中是 -inf")
                if logits[row, token] == NEG_INF
                else pick("top-k or top-p removes it", "它会被 top-k 或 top-p 移除")
            )
            may = allowed[row].nonzero().flatten().tolist()
            raise AssertionError(
                pick(
                    f"{call} drew a removed token in {int(bad.sum())} of {len(tokens)} rows; first row {row}: "
                    f"token {token}, but {why}; the tokens it may draw there: {may}",
                    f"{call} 在 {len(tokens)} 行中有 {int(bad.sum())} 行抽到了已被移除的 token；第一个在第 {row} 行："
                    f"token {token}，但{why}；该行可以抽到的 token：{may}",
                )
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


def assert_sampling_raises(kata, logits, kwargs: dict, *, reason: str) -> None:
    """sample_next_token(logits, generator=..., **kwargs) must raise ValueError (or a subclass):
    decided here, from the class names the kata process reports."""
    text = sample_text(logits, kwargs)

    def check(implementation) -> dict:
        got = sampling_raised(implementation, logits, 0, kwargs)
        if "returned" in got:
            raise AssertionError(
                pick(
                    f"{text} returned {describe(got['returned'])}; expected ValueError ({reason})",
                    f"{text} 返回了 {describe(got['returned'])}；应抛出 ValueError（{reason}）",
                )
            )
        if "ValueError" not in got["raised"]:
            raise AssertionError(
                pick(
                    f"{text} raised {got['raised'][0]}: {got['message']}; expected ValueError ({reason})",
                    f"{text} 抛出了 {got['raised'][0]}: {got['message']}；应抛出 ValueError（{reason}）",
                )
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


def assert_sampling_leaves_logits_alone(kata, logits, seed: int, kwargs: dict) -> None:
    """Inputs belong to the caller: the logits come back from the call as they were sent."""

    def check(implementation) -> dict:
        call, _, got = sample(implementation, logits, seed, kwargs)
        assert_inputs_unchanged(call, {"logits": logits}, {"logits": got["logits"]})
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)

"""sampling: filter_logits against an independent float64 formulation; sample_next_token by its draws.

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

sample_next_token is judged by its draws: argmax at temperature 0; the global RNG left
untouched; the same generator state giving the same tokens (another state other tokens);
no removed token in thousands of draws; and, on fixed seeds, the frequencies of 4000
draws within 5 standard errors of the filtered distribution, rows independent of each
other. Each sampling check is a function of the implementation that raises the same
message for the same draws, so the diagnosis replays the known slips through it.

Tolerances (measured over 100 seeds x every case of the table x the four dtypes, on the
solution and both variants; the kept sets matched exactly every time): the kept values are
one division by the temperature, so PyTorch's single-op tolerances (SINGLE_OP); the worst
|error| / (atol + rtol |expected|) against the float64 reference rounded to the dtype was
0.06 in float32, 0 in float64, 0.14 in float16 and 0.12 in bfloat16 (float32 math rounded
once to the half dtype).
"""

from __future__ import annotations

import math

import torch

from judge.forbidden import NONE
from judge.testing.checks import (
    Mismatch,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
)
from judge.testing.inputs import randn
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge
from judge.testing.tolerances import SINGLE_OP

FULL = (torch.float32, torch.float64)
HALF = (torch.float16, torch.bfloat16)
MARGIN = 2e-3  # top_p is kept this far from every token's `before`: rounding decides closer in
NEG_INF = float("-inf")

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
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    # top-p must see the probabilities left by top-k, after the temperature: the order slips,
    # the crossing token and top-k's off-by-ones all show here, each differently
    edge(
        "top-k then top-p, both biting, temperature 1.6",
        lead=[32],
        V=12,
        temperature=1.6,
        top_k=5,
        top_p=0.7,
        min_keep=1,
        banned=0,
    ),
    edge("top_k = 1 keeps the argmax alone", lead=[5], V=9, temperature=0.8, top_k=1, top_p=1.0, min_keep=1, banned=0),
    edge(
        "top_p halfway between two tokens' cumulative mass: the crossing token stays",
        lead=[],
        V=7,
        temperature=0.9,
        top_k=0,
        top_p="halfway past the top token",
        min_keep=1,
        banned=0,
    ),
    edge(
        "min_tokens_to_keep = 3 outvotes top_k = 1 and top_p = 0.2",
        lead=[4],
        V=10,
        temperature=0.7,
        top_k=1,
        top_p=0.2,
        min_keep=3,
        banned=0,
    ),
    edge(
        "three tokens already -inf per row, top_k past the finite ones",
        lead=[4],
        V=8,
        temperature=1.2,
        top_k=6,
        top_p=0.9,
        min_keep=1,
        banned=3,
    ),
    edge("top_k > V keeps every token", lead=[3], V=6, temperature=1.3, top_k=9, top_p=1.0, min_keep=1, banned=0),
    edge("V = 1", lead=[3], V=1, temperature=0.7, top_k=1, top_p=0.5, min_keep=1, banned=0),
    edge(
        "[V] alone, top_k = 0 and top_p = 1.0: the temperature only",
        lead=[],
        V=11,
        temperature=2.5,
        top_k=0,
        top_p=1.0,
        min_keep=1,
        banned=0,
    ),
    edge(
        "[A, B, V], min_tokens_to_keep = 2",
        lead=[2, 3],
        V=13,
        temperature=0.8,
        top_k=7,
        top_p=0.85,
        min_keep=2,
        banned=0,
    ),
)


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


# --------------------------------------------------------------------------- filter_logits: calls and checks


def call_filter(kata, logits, **kwargs):
    """(call, result), logits checked unchanged afterwards."""
    call = call_repr("filter_logits", logits, **kwargs)
    result = call_and_check_inputs(lambda: kata.filter_logits(logits, **kwargs), call, logits=logits)
    return call, result


def replay_filter(logits, **kwargs):
    """The same call with another implementation, on a copy of the logits taken now."""
    logits = logits.clone()

    def run(implementation) -> dict:
        _, result = call_filter(implementation, logits.clone(), **kwargs)
        kept = result != NEG_INF if isinstance(result, torch.Tensor) else result
        return {"result": result, "kept tokens": kept}

    return run


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
    where = "the row" if not row else f"row {row[0]}" if len(row) == 1 else f"row {row}"

    def listed(tokens):
        return f"{tokens[:12]}{' ...' if len(tokens) > 12 else ''}"

    text = (
        f"in {where} it kept {len(got)} token{'s' * (len(got) != 1)}, expected {len(want)}; "
        f"tokens from the most likely down: kept {listed(got)}, expected {listed(want)}. "
        f"Token {wrong} (rank {int(rank[wrong])}, 0 = the most likely"
    )
    if kwargs.get("top_p", 1.0) < 1.0:
        text += (
            f"; probability {float(info['probs'][row][wrong]):.4g} after temperature and top-k, "
            f"{float(info['before'][row][wrong]):.4g} on the tokens above it, top_p = {kwargs['top_p']:g}"
        )
    if int(rank[wrong]) < kwargs.get("min_tokens_to_keep", 1):
        text += f"; among the min_tokens_to_keep = {kwargs['min_tokens_to_keep']} most likely, which always stay"
    verdict = "kept but should be removed (-inf)" if got_kept[row][wrong] else "removed but should be kept"
    return f"{text}) was {verdict}"


def check_kept(got, want, info, *, call, kwargs) -> None:
    """Which tokens survive (are not -inf), exactly; the message tells one row's story."""
    got_kept, want_kept = (got != NEG_INF).cpu(), (want != NEG_INF).cpu()
    if torch.equal(got_kept, want_kept):
        return
    rows = (got_kept != want_kept).any(-1)
    first = tuple(int(i) for i in rows.nonzero()[0]) if rows.dim() else ()
    message = (
        f"{call} kept the wrong tokens in {int(rows.sum())} of {rows.numel()} rows: "
        f"{_row_story(got_kept, want_kept, info, first, kwargs)}"
    )
    raise Mismatch(message, what="kept tokens", actual=got_kept, expected=want_kept)


def check_filter(kata, logits, **kwargs) -> None:
    want, info = reference_filter(logits, **kwargs)  # first: the kata may break its inputs
    want = want.to(dtype=logits.dtype, device=logits.device)
    with SPEC.diagnosing(replay_filter(logits, **kwargs), filter_sizes(logits, kwargs)):
        call, got = call_filter(kata, logits, **kwargs)
        check_tensor_kind(got, want, call=call, what="result")
        check_kept(got, want, info, call=call, kwargs=kwargs)
        SPEC.assert_close(got, want, call=call, what="result")


# --------------------------------------------------------------------------- sample_next_token: calls and checks


def generator_at(seed: int, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def call_sample(kata, logits, generator, **kwargs):
    """(call, tokens), logits checked unchanged, the tokens' type, dtype, shape and device checked."""
    call = call_repr("sample_next_token", logits, generator="<torch.Generator>", **kwargs)
    tokens = call_and_check_inputs(
        lambda: kata.sample_next_token(logits, generator=generator, **kwargs), call, logits=logits
    )
    expected = torch.empty(logits.shape[:-1], dtype=torch.int64, device=logits.device)
    check_tensor_kind(tokens, expected, call=call, what="tokens")
    return call, tokens


def kept_tokens(logits, **kwargs) -> torch.Tensor:
    """[B, V] bool: the tokens sample_next_token may draw (filter_logits with min_tokens_to_keep 1)."""
    return reference_filter(logits, **kwargs)[0] != NEG_INF


def repeated_rows(gen, rows: int, V: int, copies: int, *, banned=0, std=2.0, dtype=torch.float32):
    """([rows * copies, V] logits: `rows` distinct rows interleaved, row i at i, i + rows, ...; the rows)."""
    distinct = draw_logits(gen, [rows, V], dtype, banned=banned, std=std)
    return distinct.repeat(copies, 1), distinct


def sampling_sizes(logits, kwargs) -> dict:
    return {"B": logits.size(0), "V": logits.size(-1)}


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


# --------------------------------------------------------------------------- filter_logits


@dtypes(*FULL)
def test_filter_logits_matches_hugging_faces_warpers_in_float64(kata, rng, gen, dtype, device):
    for case in SPEC.cases.cases(rng, edges=dtype == torch.float32):
        with case.judged():
            logits, kwargs = make_inputs(gen, case, dtype, device)
            check_filter(kata, logits, **kwargs)


@dtypes(*HALF)
def test_filter_logits_in_half_precision_computes_in_float32_and_returns_its_dtype(kata, rng, gen, dtype):
    for case in SPEC.cases.cases(rng, 2, edges=False) + [SPEC.cases.edges[0], SPEC.cases.edges[4]]:
        with case.judged():
            logits, kwargs = make_inputs(gen, case, dtype)
            check_filter(kata, logits, **kwargs)


def test_filter_logits_with_the_defaults_returns_the_logits_unchanged(kata, rng, gen):
    V = rng.randrange(2, 40)
    logits = draw_logits(
        gen, [rng.randrange(1, 6), V], torch.float32, banned=rng.randrange(0, V // 2 + 1) if V > 2 else 0
    )
    check_filter(kata, logits)


def test_filter_logits_each_filter_alone(kata, rng, gen):
    """One filter at a time, so a slip in one cannot hide behind another."""
    V = rng.randrange(10, 30)
    logits = draw_logits(gen, [rng.randrange(3, 7), V], torch.float64)
    for kwargs, low, high in (
        ({"temperature": round(rng.uniform(0.3, 3.0), 2)}, 1.0, 1.0),
        ({"top_k": rng.randrange(2, V)}, 1.0, 1.0),
        ({}, 0.3, 0.95),
        ({"min_tokens_to_keep": rng.randrange(2, 5)}, 0.01, 0.1),  # top_p alone would keep one token
    ):
        top_p = round(rng.uniform(low, high), 3)
        while not top_p_is_decided(logits, top_p, **kwargs):
            top_p = round(rng.uniform(low, high), 3)
        check_filter(kata, logits, **kwargs, **({"top_p": top_p} if top_p < 1.0 else {}))


def test_filter_logits_rejects_bad_settings_with_value_error(kata, gen):
    logits = randn(gen, 2, 5)
    for kwargs, reason in (
        ({"temperature": 0.0}, "filter_logits needs temperature > 0"),
        ({"temperature": -0.5}, "a negative temperature"),
        ({"top_k": -1}, "top_k < 0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"top_p": -0.2}, "top_p must be in (0, 1]"),
    ):
        call = call_repr("filter_logits", logits, **kwargs)

        def check(implementation, kwargs=kwargs, call=call, reason=reason) -> dict:
            assert_raises_value_error(
                lambda: implementation.filter_logits(logits.clone(), **kwargs), call=call, reason=reason
            )
            return {}

        with SPEC.diagnosing(check, {"V": 5}):
            check(kata)


def test_filter_logits_result_follows_the_device_of_the_logits(kata, rng, gen, other_device):
    case = SPEC.cases.edges[0]
    logits, kwargs = make_inputs(gen, case, torch.float32)
    logits = logits.to(other_device)
    if other_device != "meta":
        check_filter(kata, logits, **kwargs)
        return
    want = torch.empty(logits.shape, device="meta")  # meta: a shape and a device, no values
    with SPEC.diagnosing(replay_filter(logits, **kwargs), filter_sizes(logits, kwargs)):
        call, got = call_on_device(lambda: call_filter(kata, logits, **kwargs), other_device)
        check_tensor_kind(got, want, call=call, what="result")


# --------------------------------------------------------------------------- sample_next_token


def test_temperature_zero_is_greedy_the_argmax_of_each_row(kata, rng, gen):
    V = rng.randrange(5, 40)  # flat logits (std 0.5): a draw would often miss the argmax
    logits = draw_logits(gen, [rng.randrange(12, 20), V], torch.float32, banned=1, std=0.5)
    kwargs = {"temperature": 0.0, "top_k": rng.choice([0, V - 1]), "top_p": rng.choice([1.0, 0.99])}
    seed = rng.randrange(2**31)
    want = logits.argmax(-1)

    def greedy(implementation) -> dict:
        return {"tokens": call_sample(implementation, logits.clone(), generator_at(seed), **kwargs)[1]}

    with SPEC.diagnosing(greedy, sampling_sizes(logits, kwargs)):
        call, got = call_sample(kata, logits.clone(), generator_at(seed), **kwargs)
        if not torch.equal(got, want):
            row = int((got != want).nonzero()[0])
            raise Mismatch(
                f"{call} is not greedy: at temperature 0 each row's token is its argmax, no draw; "
                f"{int((got != want).sum())} of {len(want)} rows differ, first row {row}: got token "
                f"{int(got[row])}, expected {int(want[row])}",
                what="tokens",
                actual=got,
                expected=want,
            )


def test_sampling_leaves_the_global_rng_untouched(kata, rng, gen):
    logits = draw_logits(gen, [16, 10], torch.float32)
    kwargs = {"temperature": 1.2, "top_k": 6, "top_p": 0.95}
    seed = rng.randrange(2**31)

    def check(implementation) -> dict:
        call = call_repr("sample_next_token", logits, generator="<torch.Generator>", **kwargs)
        before = torch.get_rng_state()
        call_sample(implementation, logits.clone(), generator_at(seed), **kwargs)
        if not torch.equal(torch.get_rng_state(), before):
            raise AssertionError(
                f"{call} drew from the global RNG (torch.get_rng_state() changed): pass "
                "generator=generator to every random call (torch.multinomial, torch.rand, ...)"
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


def test_the_same_generator_state_gives_the_same_tokens_and_another_state_others(kata, rng, gen):
    logits = draw_logits(gen, [64, 8], torch.float32, std=1.0)
    kwargs = {"temperature": 1.5, "top_k": 7, "top_p": 0.98}
    seed = rng.randrange(2**31)

    def check(implementation) -> dict:
        generator = generator_at(seed)
        state = generator.get_state()
        call, first = call_sample(implementation, logits.clone(), generator, **kwargs)
        generator.set_state(state)
        _, again = call_sample(implementation, logits.clone(), generator, **kwargs)
        if not torch.equal(first, again):
            raise AssertionError(
                f"{call} gave other tokens from the same generator state ({int((first != again).sum())} of "
                f"{len(first)} rows differ): draw every random number from `generator`, nothing else"
            )
        _, other = call_sample(implementation, logits.clone(), generator_at(seed + 1), **kwargs)
        if torch.equal(first, other):
            raise AssertionError(
                f"{call} gave the very same {len(first)} tokens from two generators seeded differently: "
                "the draws must come from `generator` (not a generator of your own, nor a fixed seed)"
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


@dtypes(torch.float32, torch.bfloat16)
def test_never_draws_a_removed_token(kata, rng, gen, dtype):
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
        call, tokens = call_sample(implementation, logits.clone(), generator_at(seed), **kwargs)
        tokens = tokens.cpu()
        if ((tokens < 0) | (tokens >= V)).any():
            row = int(((tokens < 0) | (tokens >= V)).nonzero()[0])
            raise AssertionError(
                f"{call} returned token {int(tokens[row])} in row {row}: ids run from 0 to V - 1 = {V - 1}"
            )
        bad = ~allowed.gather(-1, tokens[:, None]).squeeze(-1)
        if bad.any():
            row = int(bad.nonzero()[0])
            token = int(tokens[row])
            why = "it is -inf in the logits" if logits[row, token] == NEG_INF else "top-k or top-p removes it"
            raise AssertionError(
                f"{call} drew a removed token in {int(bad.sum())} of {len(tokens)} rows; first row {row}: "
                f"token {token}, but {why}; the tokens it may draw there: {allowed[row].nonzero().flatten().tolist()}"
            )
        return {}

    with SPEC.diagnosing(check, sampling_sizes(logits, kwargs)):
        check(kata)


def test_frequencies_match_the_filtered_distribution_and_rows_are_independent(kata):
    """On fixed seeds: 4000 rows, two distributions A and B interleaved (rows 0, 2, 4... are A),
    one draw each in one call. Each token's count must be within 5 standard errors of its
    probability after the filters, a removed token never drawn; and rows must be independent:
    two A rows (or an A row and the B row beside it) agree as often as independent draws would."""
    gen = torch.Generator().manual_seed(20240611)
    V, n = 7, 2000
    logits, distinct = repeated_rows(gen, 2, V, n, std=1.2)
    kwargs = {"temperature": 0.8, "top_k": 6, "top_p": 0.97}
    assert top_p_is_decided(distinct, **kwargs)
    filtered, _ = reference_filter(distinct, **kwargs)
    probs = torch.softmax(filtered, -1)  # (2, V) float64, 0 where removed

    def check(implementation) -> dict:
        call, tokens = call_sample(implementation, logits.clone(), generator_at(7), **kwargs)
        tokens = tokens.cpu()
        for index, name in enumerate("AB"):
            drawn = tokens[index::2]
            counts = torch.bincount(drawn.clamp(0, V - 1), minlength=V).double()
            p = probs[index]
            for token in range(V):
                expected, error = n * float(p[token]), math.sqrt(n * float(p[token] * (1 - p[token])))
                if abs(counts[token] - expected) > 5 * error:
                    off = (
                        "a removed token"
                        if p[token] == 0
                        else f"{abs(counts[token] - expected) / error:.1f} standard errors off"
                    )
                    raise AssertionError(
                        f"{call}: the {n} rows of distribution {name} drew token {token} {int(counts[token])} times, "
                        f"expected {expected:.0f} +- {error:.0f} "
                        f"(probability {float(p[token]):.4f} after the filters): {off}. "
                        f"Counts {counts.long().tolist()}, expected {[round(n * float(q)) for q in p]}"
                    )
        for first, second, label, p, q in (
            (tokens[0::4], tokens[2::4], "two rows of distribution A", probs[0], probs[0]),
            (tokens[0::2], tokens[1::2], "each A row and the B row after it", probs[0], probs[1]),
        ):
            same = float((p * q).sum())  # how often two independent draws agree
            pairs = len(first)
            agree = int((first == second).sum())
            error = math.sqrt(pairs * same * (1 - same))
            if abs(agree - pairs * same) > 5 * error:
                raise AssertionError(
                    f"{call}: {label} drew the same token in {agree} of {pairs} pairs; independent draws agree "
                    f"{pairs * same:.0f} +- {error:.0f} times: each row needs its own random numbers"
                )
        return {}

    with SPEC.diagnosing(check, {"B": len(logits), "V": V}):
        check(kata)


def test_sample_next_token_rejects_a_negative_temperature_with_value_error(kata, gen):
    logits = randn(gen, 3, 6)

    def check(implementation) -> dict:
        assert_raises_value_error(
            lambda: implementation.sample_next_token(logits.clone(), generator=generator_at(0), temperature=-0.7),
            call=call_repr("sample_next_token", logits, generator="<torch.Generator>", temperature=-0.7),
            reason="a negative temperature",
        )
        return {}

    with SPEC.diagnosing(check, {"V": 6}):
        check(kata)


def test_sample_next_token_tokens_follow_the_device_of_the_logits(kata, rng, gen, other_device):
    """On CUDA with a CUDA generator; on "meta" (no GPU here) with a CPU one: shapes only."""
    logits = draw_logits(gen, [5, 9], torch.float32).to(other_device)
    generator_device = "cpu" if other_device == "meta" else other_device
    for kwargs in ({"temperature": 0.0}, {"temperature": 0.9, "top_k": 5, "top_p": 0.9}):
        seed = rng.randrange(2**31)

        def sample(implementation, kwargs=kwargs, seed=seed) -> dict:
            return {
                "tokens": call_sample(implementation, logits.clone(), generator_at(seed, generator_device), **kwargs)[1]
            }

        with SPEC.diagnosing(sample, sampling_sizes(logits, kwargs)):
            call_on_device(lambda s=sample: s(kata), other_device)


def test_does_not_modify_its_inputs(kata, rng, gen):
    """Every call is checked (see call_filter and call_sample); here in bfloat16 with tokens
    already -inf, where a kata may divide or mask in place."""
    case = SPEC.cases.edges[4]
    logits, kwargs = make_inputs(gen, case, torch.bfloat16)
    with SPEC.diagnosing(replay_filter(logits, **kwargs), filter_sizes(logits, kwargs)):
        call_filter(kata, logits, **kwargs)
    sampled = {k: kwargs[k] for k in ("temperature", "top_k", "top_p")}
    seed = rng.randrange(2**31)

    def sample(implementation) -> dict:
        return {"tokens": call_sample(implementation, logits.clone(), generator_at(seed), **sampled)[1]}

    with SPEC.diagnosing(sample, sampling_sizes(logits, sampled)):
        call_sample(kata, logits, generator_at(seed), **sampled)

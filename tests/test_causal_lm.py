"""causal_lm: a GPT-2 style language model, judged against a float64 composition of PyTorch's
pieces and by the properties of decoding, generation and training.

The reference (`Reference` below) carries the kata's parameters under the kata's names, in
float64, every one random (LayerNorm weights and biases included, see
judge.testing.modules.randomise_): nn.Embedding for the tokens and the positions; per block
nn.LayerNorm, nn.Linear q/k/v/out projections and F.scaled_dot_product_attention(is_causal=True),
nn.LayerNorm, nn.Linear up/down projections with F.gelu; a final nn.LayerNorm and F.linear with
the token embedding's weight (the tied head). The weights are copied into the learner's
model by name; its lm_head.weight must be the token embedding's own Parameter.

Judged, each inside SPEC.diagnosing with a replay that makes the same calls with another
implementation's model (same weights, copies of the inputs):
- the parameters (GPT-2's names, the head tied);
- one full pass: the logits, the cache (one (k, v) per block, [B, H, T, hs]) and the loss,
  against the reference and against F.cross_entropy(ignore_index=-100) of the learner's own
  logits; the gradient of every parameter (float64); causality on its own;
- decoding in pieces with the cache each call returns (a prefix, then random chunks, or one
  token at a time): each call's logits against the rows of one full pass of the reference,
  the cache it returns against the reference's keys and values; a prefix's cache serving
  two continuations (forward never changes the cache it is given);
- generation: greedy tokens against the reference's greedy continuation with and without
  the cache (drawn so that every step's top two logits lie at least MARGIN apart: rounding
  never decides), the prompt filled exactly to max_len; with use_cache each step feeds only
  the new token (a hook on token_embedding sees what is fed); sampling draws only from the
  generator (same state, same tokens; another state, other tokens; the global RNG
  untouched), never outside top_k, and a temperature near 0 gives the greedy tokens;
- the ValueErrors the docstring promises; the device of the results;
- training: Adam through forward(input_ids, targets) on a small fixed corpus must bring
  the loss below a threshold (see test_training_with_adam_brings_the_loss_below_the_threshold).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing import checks
from judge.testing import modules_mirrored as modules
from judge.testing.checks import (
    Inconclusive,
    Mismatch,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    check_tensor_kind,
    describe,
)
from judge.testing.spec import Case, CaseTable, KataSpec, dtypes, edge

FULL = [torch.float64, torch.float32]
CLS = "TinyCausalLM"
ASKS = (
    "token_embedding, position_embedding, blocks (an nn.ModuleList; block i with ln_1, attn.q_proj, attn.k_proj, "
    "attn.v_proj, attn.out_proj, ln_2, mlp.up_proj, mlp.down_proj), ln_f and lm_head (no bias, its weight the "
    "token embedding's)"
)

# (rtol, atol) for the logits, the cached keys and values and the loss, compared with the
# float64 reference rounded to the dtype under test. Measured over 100 seeds x every case of
# the full-pass, loss and decoding tests (edge cases included), on the solution and both
# variants, the worst |error| / (atol + rtol |expected|): float32 0.23 (logits, the variant
# whose LayerNorm is written by hand; 0.07 for the solution and the other), loss 0.005;
# float64 0.024. The hidden draws keep d_model >= 4: LayerNorm over 2 values is
# ill-conditioned (float32 off by 5e-4 there).
TOLERANCES = {
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
    torch.float32: {"rtol": 5e-5, "atol": 5e-5},
}
# The loss against F.cross_entropy of the learner's OWN logits (computed in float64, rounded
# to their dtype): only the cross-entropy's own rounding, so PyTorch's single-op tolerances in
# float32 (measured at most 0.035 of them) and the float64 one above (at most 5e-4 of it).
OWN_LOSS = {
    torch.float64: TOLERANCES[torch.float64],
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
}
# Gradients in float64, against autograd through the float64 reference: measured at most
# 0.012 of this.
GRADIENTS = {"rtol": 1e-12, "atol": 1e-12}
TOLERANCE_NOTE = (
    "logits, cached keys and values and the loss after up to 3 blocks against the float64 reference: the solution "
    "and the variants measured at most 0.23 of these in float32, 0.024 in float64 (gradients, float64 only: 0.012); "
    "greedy steps are drawn with their top two logits 1e-3 apart"
)
MARGIN = 1e-3  # greedy steps are drawn with their top two logits at least this far apart


# --------------------------------------------------------------------------- the reference


class ReferenceAttention(nn.Module):
    def __init__(self, C: int, H: int):
        super().__init__()
        self.H = H
        self.q_proj = nn.Linear(C, C, dtype=torch.float64)
        self.k_proj = nn.Linear(C, C, dtype=torch.float64)
        self.v_proj = nn.Linear(C, C, dtype=torch.float64)
        self.out_proj = nn.Linear(C, C, dtype=torch.float64)


class ReferenceMLP(nn.Module):
    def __init__(self, C: int, d_ff: int):
        super().__init__()
        self.up_proj = nn.Linear(C, d_ff, dtype=torch.float64)
        self.down_proj = nn.Linear(d_ff, C, dtype=torch.float64)


class ReferenceBlock(nn.Module):
    def __init__(self, C: int, H: int, d_ff: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, dtype=torch.float64)
        self.attn = ReferenceAttention(C, H)
        self.ln_2 = nn.LayerNorm(C, dtype=torch.float64)
        self.mlp = ReferenceMLP(C, d_ff)


class Reference(nn.Module):
    """The kata's model in float64 from PyTorch's pieces, under the kata's parameter names."""

    def __init__(self, V: int, C: int, H: int, layers: int, M: int, d_ff: int):
        super().__init__()
        self.token_embedding = nn.Embedding(V, C, dtype=torch.float64)
        self.position_embedding = nn.Embedding(M, C, dtype=torch.float64)
        self.blocks = nn.ModuleList(ReferenceBlock(C, H, d_ff) for _ in range(layers))
        self.ln_f = nn.LayerNorm(C, dtype=torch.float64)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor) -> dict:
        """{"logits" [B, T, V], "keys" and "values": per block [B, H, T, hs]}, float64 on the CPU."""
        return self.compute(input_ids)

    def compute(self, input_ids: torch.Tensor) -> dict:
        ids = input_ids.cpu()
        B, T = ids.shape
        x = self.token_embedding(ids) + self.position_embedding(torch.arange(T))
        keys, values = [], []
        C = x.size(-1)
        for block in self.blocks:
            attn = block.attn
            h = block.ln_1(x)
            q, k, v = (
                p(h).view(B, T, attn.H, C // attn.H).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj)
            )
            keys.append(k)
            values.append(v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + attn.out_proj(y.transpose(1, 2).reshape(B, T, C))
            x = x + block.mlp.down_proj(F.gelu(block.mlp.up_proj(block.ln_2(x))))
        logits = F.linear(self.ln_f(x), self.token_embedding.weight)  # the tied head
        return {"logits": logits, "keys": keys, "values": values}

    def loss(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.compute(input_ids)["logits"]  # with autograd, for the gradients
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.cpu().reshape(-1), ignore_index=-100)


# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """B batch, T tokens, P the prefix decoded first (1 <= P < T), V vocab_size, E = H * hs
    d_model, H heads, layers, M max_len (T, or a few more), F d_ff (never 4 E here).

    T, V and E differ, the head size differs from H; the first draw has two or three layers."""
    cases = []
    for index in range(count):
        H = rng.randint(1, 4)
        hs = rng.choice([n for n in range(2, 7) if n != H and n * H >= 4])  # LayerNorm over 2 values is ill-conditioned
        E = H * hs
        T = rng.choice([n for n in range(4, 12) if n != E])
        B = rng.choice([n for n in range(1, 5) if n != T])
        V = rng.choice([n for n in range(3, 30) if n not in (E, T, B)])
        layers = rng.randint(2, 3) if index == 0 else rng.randint(1, 3)
        F_ = rng.choice([n for n in range(E + 1, 3 * E + 6) if n not in (B, T, V, 4 * E)])
        cases.append(
            {
                "B": B,
                "T": T,
                "P": rng.randint(1, T - 1),
                "V": V,
                "E": E,
                "H": H,
                "layers": layers,
                "M": T + rng.choice([0, 1, 4]),
                "F": F_,
            }
        )
    return cases


EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("two layers, odd head size, the sequence fills max_len", B=2, T=7, P=3, V=11, E=10, H=2, layers=2, M=7, F=13),
    edge("head size 1, a vocabulary smaller than d_model", B=2, T=5, P=2, V=3, E=4, H=4, layers=1, M=9, F=6),
    edge("one head, three layers, a one-token prefix", B=3, T=6, P=1, V=9, E=5, H=1, layers=3, M=8, F=7),
    edge("one sequence of one token", B=1, T=1, P=1, V=6, E=6, H=2, layers=1, M=1, F=9),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=2)


# --------------------------------------------------------------------------- building the learner's model


@dataclass
class Model:
    """One case built: the float64 reference (every parameter random, rounded to the dtype),
    how the learner's model was built (for messages), and `make(implementation)`: that
    implementation's TinyCausalLM with the reference's weights, in the dtype, on the device."""

    reference: Reference
    name: str
    case: Case
    dtype: torch.dtype
    device: str
    make: Callable
    module: nn.Module | None = None  # the learner's


def check_tied(module: nn.Module, built: str) -> None:
    """lm_head.weight must be token_embedding.weight itself, not a copy nor a second matrix."""
    for part in ("token_embedding", "lm_head"):
        missing = not isinstance(getattr(module, part, None), nn.Module)
        if missing:
            raise AssertionError(f"{built} has no submodule `{part}`; the kata asks for {ASKS}")
    head, embedding = module.lm_head.weight, module.token_embedding.weight
    if head is not embedding:
        raise AssertionError(
            f"{built}.lm_head.weight is not token_embedding.weight: the head must be tied to the token embedding, "
            "the very same nn.Parameter (self.lm_head.weight = self.token_embedding.weight), not a copy or a "
            "matrix of its own"
        )


def load_weights(module: nn.Module, expected: dict[str, torch.Tensor], *, built: str) -> nn.Module:
    """Copy the reference's parameters into the learner's model by name (lm_head.weight is the
    token embedding's), with a message naming the first missing, extra or misshapen one."""
    check_tied(module, built)
    have = dict(module.named_parameters(remove_duplicate=False))
    wanted = {**expected, "lm_head.weight": expected["token_embedding.weight"]}
    for name, tensor in wanted.items():
        if name in have:
            continue
        *path, leaf = name.split(".")
        owner, walked = module, [built]
        for part in path:
            child = getattr(owner, part, None)
            if isinstance(child, nn.Module):
                owner, walked = child, walked + [part]
                continue
            if isinstance(child, (list, tuple)):
                message = (
                    f"{'.'.join(walked)}.{part} is a Python {type(child).__name__}: keep the blocks in an nn.ModuleList, "
                    "or their parameters are never registered (the grader cannot copy weights in, an optimizer never "
                    "sees them)"
                )
            else:
                message = f"{'.'.join(walked)} has no submodule `{part}`; the kata asks for {ASKS}"
            raise AssertionError(message)
        raise AssertionError(
            f"{'.'.join(walked)} has no parameter `{leaf}` (expected one of shape {list(tensor.shape)}); every "
            "nn.Linear but lm_head and every nn.LayerNorm has a bias"
        )
    for name, p in have.items():
        if name not in wanted:
            raise AssertionError(
                f"{built} has a parameter `{name}` of shape {list(p.shape)} that the kata does not ask for; it asks "
                f"for {ASKS}" + (" (lm_head has no bias)" if name == "lm_head.bias" else "")
            )
        if p.shape != wanted[name].shape:
            raise AssertionError(
                f"{built}.{name} has shape {list(p.shape)}, expected {list(wanted[name].shape)} "
                "(nn.Linear(in, out) keeps its weight as [out, in]; nn.Embedding(n, d) as [n, d])"
            )
    with torch.no_grad():
        for name, p in have.items():
            p.copy_(wanted[name].to(p.dtype))
    return module


def build(kata, gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, initialise=None) -> Model:
    """The reference with random weights (or `initialise(reference)`'s) and the learner's model
    holding them. d_ff is passed unless `defaults` (then the reference's is 4 * d_model)."""
    V, E, H, layers, M = case["V"], case["E"], case["H"], case["layers"], case["M"]
    d_ff = 4 * E if defaults else case["F"]
    reference = Reference(V, E, H, layers, M, d_ff)
    if initialise is None:
        modules.randomise_(reference, gen, dtype)
    else:
        initialise(reference)
    keywords = {} if defaults else {"d_ff": d_ff}
    name = modules.module_repr(CLS, vocab_size=V, d_model=E, num_heads=H, num_layers=layers, max_len=M, **keywords)
    expected = {n: p.detach() for n, p in reference.named_parameters()}

    def make(implementation) -> nn.Module:
        module = getattr(implementation, CLS)(V, E, H, layers, M, **keywords).to(dtype)
        load_weights(module, expected, built=name)
        return module.to(device)

    model = Model(reference, name, case, dtype, device, make)
    with SPEC.diagnosing(lambda implementation: {"module": make(implementation)}, case):
        model.module = make(kata)
    return model


def token_ids(gen, B: int, T: int, V: int, device="cpu") -> torch.Tensor:
    return torch.randint(V, (B, T), generator=gen).to(device)


def aligned_targets(gen, ids: torch.Tensor, V: int) -> torch.Tensor:
    """Random targets [B, T] with about a third -100 (ignored): at least one position kept, and
    at least one ignored where there are two or more."""
    targets = torch.randint(V, ids.shape, generator=gen)
    ignored = torch.rand(ids.shape, generator=gen) < 0.35
    kept, dropped = torch.randperm(ids.numel(), generator=gen)[:2].tolist() + [None] * (2 - min(ids.numel(), 2))
    ignored.view(-1)[kept] = False
    if dropped is not None:
        ignored.view(-1)[dropped] = True
    return targets.masked_fill(ignored, -100).to(ids.device)


# --------------------------------------------------------------------------- calling forward


def forward_text(model: Model, ids, *, targets=None, held: int | None = None) -> str:
    parts = [describe(ids)]
    if targets is not None:
        parts.append(f"targets={describe(targets)}")
    if held is not None:
        parts.append(f"cache=<the cache of {held} tokens>")
    return f"{model.name}({', '.join(parts)})"


def run_forward(module, text: str, ids, *, targets=None, cache=None) -> dict:
    """forward, checked: inputs (the cache included) unchanged, the cache list it was given
    unchanged, a triple returned. {"logits", "loss", "cache"}."""
    watched = {"input_ids": ids, "targets": targets}
    kwargs = {} if targets is None else {"targets": targets}
    held = None
    if cache is not None:
        kwargs["cache"] = cache
        held = [tuple(pair) for pair in cache]
        for index, (k, v) in enumerate(held):
            watched[f"cache[{index}][0]"], watched[f"cache[{index}][1]"] = k, v
    result = call_and_check_inputs(lambda: module(ids, **kwargs), text, **watched)
    if held is not None and (
        len(cache) != len(held) or any(a is not b for old, new in zip(held, cache) for a, b in zip(old, new))
    ):
        raise AssertionError(
            f"{text} changed the cache list it was given (it put new tensors into it): forward never changes the "
            "cache it is given; build a new list, so one prefix's cache can serve several continuations"
        )
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise AssertionError(f"{text} returned {describe(result)}; expected a triple (logits, loss, cache)")
    return dict(zip(("logits", "loss", "cache"), result))


def cache_form(cache) -> str:
    """How a cache looks, e.g. '2 pairs (k, v): (float32[2, 2, 5, 5], float32[2, 2, 5, 5]) ...'."""
    if not isinstance(cache, (list, tuple)):
        return describe(cache)
    pairs = []
    for pair in cache:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(t, torch.Tensor) for t in pair)):
            return f"a {type(cache).__name__} of {len(cache)} items, one of them {describe(pair)}"
        pairs.append(f"({describe(pair[0])}, {describe(pair[1])})")
    return f"{len(cache)} pair{'s' * (len(cache) != 1)} (k, v): {', '.join(pairs)}"


def expected_form(model: Model, B: int, S: int) -> str:
    c = model.case
    shape = torch.empty(B, c["H"], S, c["E"] // c["H"], dtype=model.dtype, device=model.device)
    return cache_form([(shape, shape)] * c["layers"])


def observe(out: dict) -> dict:
    """What a forward returned, as the checks compare it: the logits, the loss, the cache's form
    and, per block, its keys and values."""
    seen = {"logits": out["logits"], "loss": out["loss"], "cache form": cache_form(out["cache"])}
    cache = out["cache"]
    if isinstance(cache, (list, tuple)):
        for index, pair in enumerate(cache):
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                seen[f"keys of block {index}"], seen[f"values of block {index}"] = pair
    return seen


def check_cache(model: Model, seen: dict, want: dict, B: int, S: int, *, call: str) -> None:
    """The cache returned after S tokens: its form, then each block's keys and values."""
    form = expected_form(model, B, S)
    if seen["cache form"] != form:
        raise Mismatch(
            f"{call} returned a cache of {seen['cache form']}; expected a list with one pair (k, v) per block, "
            f"each [B, H, tokens so far, hs]: {form}",
            what="cache form",
            actual=seen["cache form"],
            expected=form,
        )
    if model.device == "meta":
        return
    for index in range(model.case["layers"]):
        for what, key in ((f"keys of block {index}", "keys"), (f"values of block {index}", "values")):
            expected = want[key][index][:, :, :S].to(dtype=model.dtype, device=model.device)
            assert_close(
                seen[what], expected, call=f"{call}, in the cache", what=what, tolerance=TOLERANCES[model.dtype]
            )


def assert_close(actual, expected, *, call: str, what: str, tolerance: dict) -> None:
    """checks.assert_close, with a quick pass for a result that is plainly close."""
    check_tensor_kind(actual, expected, call=call, what=what)
    if not expected.is_meta and torch.allclose(actual, expected, rtol=tolerance["rtol"], atol=tolerance["atol"]):
        return
    checks.assert_close(actual, expected, call=call, what=what, tolerance=tolerance)


def check_loss(got, want: torch.Tensor, own: torch.Tensor | None, *, call: str, dtype) -> None:
    """The loss: a 0-d tensor of the logits' dtype, equal to F.cross_entropy of the learner's own
    logits (ignore_index=-100, no shift) and to the reference's."""
    if got is None:
        raise Mismatch(
            f"{call} returned loss None; with targets it returns the mean cross-entropy",
            what="loss",
            actual=got,
            expected=want,
        )
    check_tensor_kind(got, want, call=call, what="loss")
    if own is not None:
        assert_close(
            got,
            own,
            call=f"{call}, compared with F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100) "
            "of the logits it returned,",
            what="loss",
            tolerance=OWN_LOSS[dtype],
        )
    assert_close(got, want, call=call, what="loss", tolerance=TOLERANCES[dtype])


def own_cross_entropy(logits, targets) -> torch.Tensor | None:
    """F.cross_entropy of the learner's logits in float64, rounded to their dtype."""
    if not isinstance(logits, torch.Tensor) or logits.is_meta or logits.dim() != 3:
        return None
    flat = logits.detach().double().reshape(-1, logits.size(-1))
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=-100).to(logits.dtype)


def full_pass(implementation, model: Model, ids, targets=None, module=None) -> tuple[str, dict]:
    module = model.make(implementation) if module is None else module
    text = forward_text(model, ids, targets=targets)
    return text, observe(run_forward(module, text, ids, targets=targets))


def full_pass_replay(model: Model, ids, targets=None):
    ids, targets = ids.clone(), None if targets is None else targets.clone()

    def replay(implementation) -> dict:
        return full_pass(implementation, model, ids.clone(), None if targets is None else targets.clone())[1]

    return replay


def check_full_pass(kata, model: Model, ids, targets=None) -> None:
    """logits, loss (or None) and the cache of one call without a cache."""
    B, T = ids.shape
    want = None if model.device == "meta" else model.reference(ids)
    with SPEC.diagnosing(full_pass_replay(model, ids, targets), model.case):
        text, seen = full_pass(kata, model, ids, targets, model.module)
        if want is None:
            check_tensor_kind(
                seen["logits"],
                torch.empty(B, T, model.case["V"], dtype=model.dtype, device="meta"),
                call=text,
                what="logits",
            )
        else:
            expected = want["logits"].detach().to(dtype=model.dtype, device=model.device)
            assert_close(seen["logits"], expected, call=text, what="logits", tolerance=TOLERANCES[model.dtype])
        if targets is None:
            if seen["loss"] is not None:
                raise Mismatch(
                    f"{text} returned loss {describe(seen['loss'])}; expected None without targets",
                    what="loss",
                    actual=seen["loss"],
                    expected=None,
                )
        elif want is None:
            check_tensor_kind(seen["loss"], torch.empty((), dtype=model.dtype, device="meta"), call=text, what="loss")
        else:
            expected = F.cross_entropy(
                want["logits"].reshape(-1, model.case["V"]), targets.cpu().reshape(-1), ignore_index=-100
            ).detach()
            own = own_cross_entropy(seen["logits"], targets)
            check_loss(
                seen["loss"], expected.to(dtype=model.dtype, device=model.device), own, call=text, dtype=model.dtype
            )
        check_cache(model, seen, want, B, T, call=text)


# --------------------------------------------------------------------------- decoding in pieces


def prefix_then_one_at_a_time(case) -> list[tuple[int, int]]:
    P, T = case["P"], case["T"]
    return [(0, P)] + [(t, t + 1) for t in range(P, T)]


def prefix_then_chunks(rng, case) -> list[tuple[int, int]]:
    """The prefix, then chunks of 1 to 4 tokens, the first of at least 2 where they fit
    (several new tokens after held ones: the causal mask aligned bottom-right)."""
    P, T = case["P"], case["T"]
    chunks, start = [(0, P)], P
    while start < T:
        end = min(T, start + rng.randint(2 if start == P else 1, 4))
        chunks.append((start, end))
        start = end
    return chunks


def decode(implementation, model: Model, ids, chunks, module=None):
    """Feed ids [B, T] chunk by chunk, each call with the cache the previous one returned.
    Yields (call text, observation) after each call. The same path runs the learner's model
    and, for the diagnosis, a known slip's."""
    module = model.make(implementation) if module is None else module
    story = f"decoding [{', '.join(str(b - a) for a, b in chunks)}] tokens per call"
    cache = None
    for step, (a, b) in enumerate(chunks):
        piece = ids[:, a:b].clone()
        call = forward_text(model, piece, held=None if cache is None else a)
        text = f"{story}: call {step + 1}, tokens {a}..{b - 1}: {call}"
        try:
            out = run_forward(module, text, piece, cache=cache)
        except ValueError as error:
            raise AssertionError(
                f"{text} raised ValueError: {error}; but {a} held + {b - a} new = {b} tokens fit in "
                f"max_len={model.case['M']}"
            ) from None
        yield text, observe(out)
        cache = out["cache"]


def replay_of(model: Model, ids, chunks, index: int):
    copy = ids.clone()

    def replay(implementation) -> dict:
        for number, (_, seen) in enumerate(decode(implementation, model, copy.clone(), chunks)):
            if number == index:
                return seen
        return {}

    return replay


def check_decoding(kata, model: Model, ids, chunks) -> None:
    """Each call's logits against the reference's rows for its tokens (one causal pass over the
    whole sequence), and the cache it returns against the reference's keys and values."""
    B = ids.size(0)
    meta = model.device == "meta"
    want = None if meta else model.reference(ids)
    observations = decode(kata, model, ids, chunks, model.module)
    for index, (a, b) in enumerate(chunks):
        with SPEC.diagnosing(replay_of(model, ids, chunks, index), model.case):
            text, seen = next(observations)
            if meta:
                expected = torch.empty(B, b - a, model.case["V"], dtype=model.dtype, device="meta")
                check_tensor_kind(seen["logits"], expected, call=text, what="logits")
            else:
                expected = want["logits"][:, a:b].detach().to(dtype=model.dtype, device=model.device)
                call = f"{text}, compared with rows {a}..{b - 1} of one causal pass over the whole sequence,"
                assert_close(seen["logits"], expected, call=call, what="logits", tolerance=TOLERANCES[model.dtype])
            check_cache(model, seen, want, B, b, call=text)


# --------------------------------------------------------------------------- generating


def generate_text(model: Model, prompt, new: int, **shown) -> str:
    parts = [describe(prompt), str(new)] + [f"{k}={v}" for k, v in shown.items()]
    return f"{model.name}.generate({', '.join(parts)})"


def call_generate(module, model: Model, prompt, new: int, *, seed: int | None = None, **kwargs):
    """(call text, tokens) after checking the tokens' kind, that they start with the prompt, and
    that the prompt was left as it was. `seed`: a fresh torch.Generator seeded with it."""
    shown = dict(kwargs) | ({"generator": f"<torch.Generator seeded {seed}>"} if seed is not None else {})
    text = generate_text(model, prompt, new, **shown)
    if seed is not None:
        kwargs["generator"] = torch.Generator(device=prompt.device).manual_seed(seed)
    try:
        tokens = call_and_check_inputs(lambda: module.generate(prompt, new, **kwargs), text, input_ids=prompt)
    except ValueError as error:
        raise AssertionError(
            f"{text} raised ValueError: {error}; but {prompt.size(1)} + {new} = {prompt.size(1) + new} tokens fit in "
            f"max_len={model.case['M']} (filling it exactly is fine)"
        ) from None
    B, T = prompt.shape
    check_tensor_kind(
        tokens, torch.empty(B, T + new, dtype=torch.int64, device=prompt.device), call=text, what="tokens"
    )
    if not prompt.is_meta and not torch.equal(tokens[:, :T], prompt):
        raise Mismatch(
            f"{text} returned tokens that do not start with input_ids: return the prompt followed by the new tokens",
            what="tokens",
            actual=tokens,
            expected=prompt,
        )
    return text, tokens


def reference_greedy(reference: Reference, prompt, new: int) -> tuple[torch.Tensor, float]:
    """The greedy continuation in float64 (the argmax of the last position, step by step), and
    the smallest gap between the top two logits met on the way."""
    ids, gap = prompt.cpu(), math.inf
    for _ in range(new):
        logits = reference(ids)["logits"][:, -1]
        top = logits.topk(2, dim=-1).values
        gap = min(gap, float((top[:, 0] - top[:, 1]).min()))
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids, gap


def decided_prompt(gen, model: Model, B: int, T: int, new: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt, the reference's greedy tokens), the prompt redrawn until every step's top two
    logits lie MARGIN apart: which token is the argmax never depends on rounding."""
    V = model.case["V"]
    for _ in range(100):
        prompt = token_ids(gen, B, T, V)
        tokens, gap = reference_greedy(model.reference, prompt, new)
        if gap >= MARGIN:
            return prompt.to(model.device), tokens
    raise RuntimeError("could not draw a prompt whose greedy steps are all decided")  # never in practice


def generation_sizes(case) -> tuple[int, int]:
    """(prompt length, new tokens) of a case: the prompt P (at least 2 where T allows), then
    tokens up to max_len exactly."""
    prompt = min(max(case["P"], 2), case["M"])
    return prompt, case["M"] - prompt


def check_greedy(kata, model: Model, prompt, want, use_cache: bool) -> None:
    new = want.size(1) - prompt.size(1)

    original = prompt.clone()

    def replay(implementation) -> dict:
        return {
            "tokens": call_generate(model.make(implementation), model, original.clone(), new, use_cache=use_cache)[1]
        }

    with SPEC.diagnosing(replay, model.case):
        text, got = call_generate(model.module, model, prompt, new, use_cache=use_cache)
        if not torch.equal(got.cpu(), want):
            wrong = (got.cpu() != want).nonzero()[0].tolist()
            raise Mismatch(
                f"{text} returned other tokens than greedy decoding of the float64 reference: first at row {wrong[0]}, "
                f"position {wrong[1]} (new token {wrong[1] - prompt.size(1) + 1}): got {int(got[tuple(wrong)])}, expected "
                f"{int(want[tuple(wrong)])}; each new token is the argmax of the LAST position's logits (every step's "
                f"top two logits here are at least {MARGIN} apart)",
                what="tokens",
                actual=got,
                expected=want.to(got.device),
            )


# --------------------------------------------------------------------------- the benchmark


def benchmark(kata, device):
    """(kata call, reference call): greedy generation of 192 tokens after a prompt of 16, batch
    1, vocabulary 256, d_model 128, 4 heads, 2 layers. The kata call generates with its cache
    (use_cache=True: one token per step); the reference call is the same module with
    use_cache=False, recomputing the whole sequence at each step (what the cache saves). The
    ratio is cached / recomputed."""
    V, C, H, layers, P, N = 256, 128, 4, 2, 16, 192
    reference = modules.randomise_(
        Reference(V, C, H, layers, P + N, 4 * C), torch.Generator().manual_seed(0), torch.float32
    )
    module = getattr(kata, CLS)(V, C, H, layers, P + N)
    load_weights(module, {n: p.detach() for n, p in reference.named_parameters()}, built=CLS)
    module = module.to(device).eval()
    prompt = torch.randint(V, (1, P), generator=torch.Generator().manual_seed(1)).to(device)
    return (lambda: module.generate(prompt, N)), (lambda: module.generate(prompt, N, use_cache=False))


SPEC = KataSpec(
    kata="causal_lm",
    symbol=CLS,
    reference=(
        "a float64 composition under the kata's names: nn.Embedding, nn.LayerNorm, nn.Linear, "
        "F.scaled_dot_product_attention(is_causal=True), F.gelu, the head F.linear with the token embedding's weight; "
        "F.cross_entropy(ignore_index=-100) for the loss; generation and training by their properties"
    ),
    forbidden=ATTENTION,
    tolerances=TOLERANCES,
    tolerance_note=TOLERANCE_NOTE,
    cases=CASES,
    benchmark=benchmark,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Every test on one CPU thread, restored after: the matrices here are tiny, and two threads
    only wait on each other (on a busy machine, 10x slower or worse)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------- the parameters


def test_lm_head_is_tied_to_the_token_embedding_and_the_parameters_are_gpt2s(kata, rng, gen):
    """lm_head.weight IS token_embedding.weight; the names and shapes the docstring lists,
    with d_ff given and left to its default (4 * d_model)."""
    case = CASES.random(rng)[0]
    with case.judged():
        build(kata, gen, rng, case)
        model = build(kata, gen, rng, case, defaults=True)
        check_full_pass(kata, model, token_ids(gen, case["B"], case["T"], case["V"]))


# --------------------------------------------------------------------------- one full pass


@dtypes(*FULL)
def test_logits_and_cache_of_a_full_pass_match_the_float64_reference(kata, rng, gen, dtype, device):
    """cache=None, targets=None: logits [B, T, V], loss None, and the cache of the T tokens."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype, device)
            check_full_pass(kata, model, token_ids(gen, case["B"], case["T"], case["V"], device))


@dtypes(*FULL)
def test_loss_is_the_cross_entropy_of_the_logits_with_minus_100_ignored(kata, rng, gen, dtype):
    """targets aligned with input_ids (never shifted inside forward), about a third -100."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_full_pass(kata, model, ids, aligned_targets(gen, ids, case["V"]))


def test_the_loss_backpropagates_into_every_parameter_as_the_reference(kata, rng, gen):
    """float64: the gradient of the loss for every parameter (the tied weight gets both its
    uses) against autograd through the reference."""
    for case in [CASES.edges[0], *CASES.random(rng)]:
        with case.judged():
            model = build(kata, gen, rng, case, torch.float64)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            targets = aligned_targets(gen, ids, case["V"])
            model.reference.zero_grad()
            model.reference.loss(ids, targets).backward()
            wanted = {n: p.grad for n, p in model.reference.named_parameters()}
            text = forward_text(model, ids, targets=targets) + ".backward()"

            def gradients(implementation, module=None, ids=ids, targets=targets, model=model, text=text) -> dict:
                module = model.make(implementation) if module is None else module
                out = run_forward(module, text, ids.clone(), targets=targets.clone())
                if not isinstance(out["loss"], torch.Tensor) or not out["loss"].requires_grad:
                    raise AssertionError(
                        f"{text}: the loss {describe(out['loss'])} does not require grad; it must be computed from the "
                        "logits with torch operations (no .item(), no .detach(), no torch.no_grad())"
                    )
                out["loss"].backward()
                return {f"gradient of {n}": p.grad for n, p in module.named_parameters(remove_duplicate=False)}

            with SPEC.diagnosing(gradients, case):
                got = gradients(kata, model.module)
                for name, expected in wanted.items():
                    what = f"gradient of {name}"
                    if got.get(what) is None:
                        raise Mismatch(
                            f"after {text}, {name}.grad is None: the loss does not depend on it (detached, or not used)",
                            what=what,
                            actual=None,
                            expected=expected,
                        )
                    assert_close(got[what], expected, call=text, what=what, tolerance=GRADIENTS)


def test_later_tokens_do_not_change_earlier_logits(kata, rng, gen):
    """Causality on its own: change every token from position t on; the logits before t stay."""
    case = CASES.random(rng)[0]
    model = build(kata, gen, rng, case)
    T, V = case["T"], case["V"]
    ids = token_ids(gen, case["B"], T, V)
    t = rng.randrange(1, T)
    changed = ids.clone()
    changed[:, t:] = (ids[:, t:] + torch.randint(1, V, ids[:, t:].shape, generator=gen)) % V

    def check(implementation, module=None) -> dict:
        module = model.make(implementation) if module is None else module
        text = forward_text(model, ids)
        before = run_forward(module, text, ids.clone())["logits"]
        after = run_forward(module, text, changed.clone())["logits"]
        moved = (before[:, :t] - after[:, :t]).abs().amax(dim=(0, 2)) > TOLERANCES[torch.float32]["atol"]
        if moved.any():
            p = int(moved.nonzero()[0])
            raise AssertionError(
                f"{text}: changing the tokens at positions {t}..{T - 1} only changed the logits at position {p} < {t}; "
                "position p may attend to positions 0..p only (block key j > query i)"
            )
        return {}

    with case.judged(), SPEC.diagnosing(check, case):
        check(kata, model.module)


# --------------------------------------------------------------------------- decoding with the cache


@dtypes(*FULL)
def test_a_prefix_then_chunks_with_the_cache_match_one_full_pass(kata, rng, gen, dtype, device):
    """A prefix, then chunks of 1 to 4 tokens, each call with the cache the previous one
    returned: positions continue after the held tokens; new token i sees the held ones and the
    new ones up to itself."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype, device)
            ids = token_ids(gen, case["B"], case["T"], case["V"], device)
            check_decoding(kata, model, ids, prefix_then_chunks(rng, case))


@dtypes(*FULL)
def test_a_prefix_then_one_token_at_a_time_matches_one_full_pass(kata, rng, gen, dtype):
    """What generate does with its cache: every step's logits agree with the full pass."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            model = build(kata, gen, rng, case, dtype)
            ids = token_ids(gen, case["B"], case["T"], case["V"])
            check_decoding(kata, model, ids, prefix_then_one_at_a_time(case))


def test_one_prefix_cache_serves_two_continuations(kata, rng, gen):
    """forward never changes the cache it is given: the prefix's cache, passed with one
    continuation, still decodes another."""
    for case in [CASES.edges[0], *CASES.random(rng)]:
        with case.judged():
            model = build(kata, gen, rng, case)
            B, T, P, V = case["B"], case["T"], case["P"], case["V"]
            first = token_ids(gen, B, T, V)
            second = torch.cat([first[:, :P], token_ids(gen, B, T - P, V)], dim=1)

            def branches(implementation, module=None, first=first, second=second, model=model, P=P) -> dict:
                module = model.make(implementation) if module is None else module
                prefix = run_forward(module, forward_text(model, first[:, :P]), first[:, :P].clone())["cache"]
                seen = {}
                for label, ids in (("first", first), ("second", second)):
                    text = forward_text(model, ids[:, P:], held=P)
                    seen[f"logits of the {label} continuation"] = run_forward(
                        module, text, ids[:, P:].clone(), cache=prefix
                    )["logits"]
                return seen

            with SPEC.diagnosing(branches, case):
                got = branches(kata, model.module)
                for label, ids in (("first", first), ("second", second)):
                    expected = model.reference(ids)["logits"][:, P:].detach().float()
                    text = (
                        f"{forward_text(model, ids[:, P:], held=P)} with the prefix's cache, after "
                        f"{'nothing else' if label == 'first' else 'the same cache served another continuation'},"
                    )
                    what = f"logits of the {label} continuation"
                    assert_close(got[what], expected, call=text, what=what, tolerance=TOLERANCES[torch.float32])


# --------------------------------------------------------------------------- generation


def test_greedy_generation_matches_the_reference_with_and_without_the_cache(kata, rng, gen):
    """temperature=0: the prompt, then the argmax of the last position's logits step by step,
    up to max_len exactly; use_cache=True and use_cache=False give the same tokens."""
    for case in CASES.cases(rng):
        with case.judged():
            model = build(kata, gen, rng, case)
            prompt_length, new = generation_sizes(case)
            prompt, want = decided_prompt(gen, model, case["B"], prompt_length, new)
            for use_cache in (True, False):
                check_greedy(kata, model, prompt, want, use_cache)


def test_with_use_cache_each_step_feeds_only_the_new_token(kata, rng, gen):
    """What each forward is fed, seen at the model's own forward (and, if generate bypasses it,
    at token_embedding): the whole prompt first, then one token per row at a time. When neither
    can be observed the check is not judged, never passed."""
    case = CASES.random(rng)[0]
    prompt_length, new = rng.randint(2, 4), rng.randint(3, 5)
    case = case | {"P": prompt_length, "M": prompt_length + new + rng.choice([0, 2])}
    model = build(kata, gen, rng, case)
    B = case["B"]
    prompt = token_ids(gen, B, prompt_length, case["V"])

    def fed(implementation, module=None) -> dict:
        module = model.make(implementation) if module is None else module
        shapes, embedded = [], []
        original = module.forward

        def recording(input_ids, *args, **kwargs):
            shapes.append(list(input_ids.shape))
            return original(input_ids, *args, **kwargs)

        module.forward = recording  # an instance attribute: self(...) and self.forward(...) both meet it
        hook = module.token_embedding.register_forward_pre_hook(lambda _, args: embedded.append(list(args[0].shape)))
        try:
            text, _ = call_generate(module, model, prompt.clone(), new)
        finally:
            hook.remove()
            del module.forward
        return {"fed": shapes or embedded, "text": text}

    with case.judged(), SPEC.diagnosing(fed, case):
        seen = fed(kata, model.module)
        shapes, text = seen["fed"], seen["text"]
        if not shapes:
            raise Inconclusive(
                "what generate feeds the model could not be observed: it calls neither the model's forward "
                "nor token_embedding as a module"
            )
        later = [shape for shape in shapes[1:] if math.prod(shape) != B]
        if shapes[0] != [B, prompt_length] or later:
            raise Mismatch(
                f"{text} fed token_embedding {shapes[:6]}{' ...' if len(shapes) > 6 else ''}; with use_cache=True "
                f"the first forward takes the whole prompt [{B}, {prompt_length}], then each step only the newest "
                "token [B, 1] with the cache the previous call returned",
                what="fed",
                actual=shapes,
                expected=[[B, prompt_length]] + [[B, 1]] * (new - 1),
            )


def sampling_model(kata, gen, rng) -> tuple[Model, torch.Tensor, int]:
    """A model of a random draw, with a batch of 4, max_len room for 8 new tokens after a
    prompt of 3, and a vocabulary of at least 12: (model, prompt, new tokens)."""
    case = CASES.random(rng)[1]
    case = case | {"B": 4, "T": 11, "P": 3, "M": 11, "V": max(case["V"], 12)}
    model = build(kata, gen, rng, case)
    return model, token_ids(gen, 4, 3, case["V"]), 8


def test_sampling_draws_from_the_generator_only(kata, rng, gen):
    """temperature > 0: the same generator state gives the same tokens, another state others,
    and torch's global RNG is left untouched."""
    model, prompt, new = sampling_model(kata, gen, rng)
    seed = rng.randrange(2**31)
    settings = {"temperature": 1.3, "top_k": rng.randint(4, 8)}

    def check(implementation, module=None) -> dict:
        module = model.make(implementation) if module is None else module
        before = torch.get_rng_state()
        text, first = call_generate(module, model, prompt.clone(), new, seed=seed, **settings)
        if not torch.equal(torch.get_rng_state(), before):
            raise AssertionError(
                f"{text} drew from torch's global RNG (torch.get_rng_state() changed): pass generator=generator to "
                "every random call (torch.multinomial(probs, 1, generator=generator))"
            )
        _, again = call_generate(module, model, prompt.clone(), new, seed=seed, **settings)
        if not torch.equal(first, again):
            raise AssertionError(
                f"{text} gave other tokens from a generator in the same state ({int((first != again).sum())} of "
                f"{first.numel()} differ): draw every random number from `generator`"
            )
        _, other = call_generate(module, model, prompt.clone(), new, seed=seed + 1, **settings)
        if torch.equal(first, other):
            raise AssertionError(
                f"{text} gave the very same tokens from a generator seeded {seed + 1}: the draws must come from "
                "`generator` (not a generator of your own, nor a fixed seed)"
            )
        return {}

    with model.case.judged(), SPEC.diagnosing(check, model.case):
        check(kata, model.module)


def test_sampled_tokens_stay_within_top_k(kata, rng, gen):
    """temperature 2 flattens the distribution; every drawn token must be among the top_k
    largest logits of its step (the reference's, on the sequence drawn so far; a step whose
    k-th and (k+1)-th logits lie within MARGIN is not judged)."""
    model, prompt, new = sampling_model(kata, gen, rng)
    seed, k = rng.randrange(2**31), rng.randint(2, 3)
    settings = {"temperature": 2.0, "top_k": k}
    T0 = prompt.size(1)

    def draw(implementation, module=None) -> dict:
        module = model.make(implementation) if module is None else module
        text, tokens = call_generate(module, model, prompt.clone(), new, seed=seed, **settings)
        return {"tokens": tokens, "text": text}

    with model.case.judged(), SPEC.diagnosing(draw, model.case):
        seen = draw(kata, model.module)
        tokens, text = seen["tokens"], seen["text"]
        logits = model.reference(tokens)["logits"][:, T0 - 1 : -1]  # (B, new, V): step s predicts token T0 + s
        ordered = logits.sort(dim=-1, descending=True).values
        decided = (ordered[..., k - 1] - ordered[..., k]) >= MARGIN
        rank = (logits > logits.gather(-1, tokens[:, T0:, None])).sum(-1)  # (B, new): 0 = the largest
        outside = (rank >= k) & decided
        if outside.any():
            row, step = outside.nonzero()[0].tolist()
            raise Mismatch(
                f"{text} drew a token outside the top {k} in {int(outside.sum())} of {outside.numel()} steps; first "
                f"row {row}, new token {step + 1}: token {int(tokens[row, T0 + step])}, ranked {int(rank[row, step]) + 1} "
                f"by its step's logits; keep only the top_k largest logits (the others -inf) before the softmax",
                what="tokens",
                actual=tokens,
                expected=None,  # any tokens within the top k
            )


def test_a_temperature_near_zero_samples_the_greedy_tokens(kata, rng, gen):
    """temperature 1e-6 divides the logits: every step's top logit, at least MARGIN above the
    next, takes all the probability, whatever the draw."""
    model, _, new = sampling_model(kata, gen, rng)
    prompt, want = decided_prompt(gen, model, 4, 3, new)
    seed = rng.randrange(2**31)

    def draw(implementation, module=None) -> dict:
        module = model.make(implementation) if module is None else module
        text, tokens = call_generate(module, model, prompt.clone(), new, seed=seed, temperature=1e-6)
        return {"tokens": tokens, "text": text}

    with model.case.judged(), SPEC.diagnosing(draw, model.case):
        seen = draw(kata, model.module)
        tokens, text = seen["tokens"], seen["text"]
        if not torch.equal(tokens, want):
            wrong = (tokens != want).nonzero()[0].tolist()
            raise Mismatch(
                f"{text} drew token {int(tokens[tuple(wrong)])} at row {wrong[0]}, position {wrong[1]}, where the "
                f"argmax is {int(want[tuple(wrong)])} at least {MARGIN} above the rest: at temperature 1e-6 the "
                "probabilities softmax(logits / temperature) put everything on the argmax (divide by the temperature)",
                what="tokens",
                actual=tokens,
                expected=want,
            )


# --------------------------------------------------------------------------- errors, devices


def test_sizes_past_max_len_and_bad_settings_raise_value_error(kata, rng, gen):
    """d_model not divisible by num_heads; forward with more tokens than max_len, with or
    without a cache; generate past max_len; a negative temperature."""
    case = CASES.random(rng)[0]
    model = build(kata, gen, rng, case)
    B, V, layers, M = case["B"], case["V"], case["layers"], case["M"]
    held = rng.randint(1, M - 1)
    prompt = token_ids(gen, B, rng.randint(1, M), V)
    H_odd = rng.randint(2, 4)
    E_odd = H_odd * rng.randint(2, 4) + rng.randint(1, H_odd - 1)

    def too_many(implementation, count):
        module = model.make(implementation)
        return lambda: run_forward(module, "", token_ids(torch.Generator().manual_seed(0), B, count, V))

    def past_the_cache(implementation):
        module = model.make(implementation)
        ids = token_ids(torch.Generator().manual_seed(0), B, M + 2, V)
        cache = run_forward(module, "", ids[:, :held])["cache"]
        return lambda: run_forward(module, "", ids[:, held : M + 2], cache=cache)

    attempts = [
        (
            lambda implementation: lambda: getattr(implementation, CLS)(V, E_odd, H_odd, layers, M),
            modules.module_repr(CLS, vocab_size=V, d_model=E_odd, num_heads=H_odd, num_layers=layers, max_len=M),
            f"d_model {E_odd} cannot be split evenly into {H_odd} heads",
        ),
        (
            lambda implementation: too_many(implementation, M + 1),
            f"{model.name}(int64[{B}, {M + 1}])",
            f"{M + 1} tokens but max_len={M}: position {M} has no embedding",
        ),
        (
            past_the_cache,
            f"{model.name}(int64[{B}, {M + 2 - held}], cache=<the cache of {held} tokens>)",
            f"{held} held + {M + 2 - held} new tokens > max_len={M}",
        ),
        (
            lambda implementation: lambda: model.make(implementation).generate(prompt.clone(), M - prompt.size(1) + 1),
            generate_text(model, prompt, M - prompt.size(1) + 1),
            f"{prompt.size(1)} + {M - prompt.size(1) + 1} tokens > max_len={M}: the result would exceed max_len",
        ),
        (
            lambda implementation: lambda: model.make(implementation).generate(prompt.clone(), 1, temperature=-0.5),
            generate_text(model, prompt, 1, temperature=-0.5),
            "a negative temperature",
        ),
    ]
    for make_call, text, reason in attempts:

        def attempt(implementation, make_call=make_call, text=text, reason=reason) -> dict:
            assert_raises_value_error(make_call(implementation), call=text, reason=reason)
            return {}

        with case.judged(), SPEC.diagnosing(attempt, case):
            attempt(kata)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """Positions and the causal mask made inside forward must be made on input_ids' device;
    generate returns its tokens there."""
    case = CASES.random(rng)[0]
    with case.judged():
        model = build(kata, gen, rng, case, device=other_device)
        ids = token_ids(gen, case["B"], case["T"], case["V"])
        targets = aligned_targets(gen, ids, case["V"]).to(other_device)
        ids = ids.to(other_device)
        call_on_device(lambda: check_full_pass(kata, model, ids, targets), other_device)
        call_on_device(lambda: check_decoding(kata, model, ids, prefix_then_chunks(rng, case)), other_device)
        prompt_length, new = generation_sizes(case)
        if other_device == "meta":
            call_on_device(lambda: call_generate(model.module, model, ids[:, :prompt_length], new), other_device)
        else:
            prompt, want = decided_prompt(gen, model, case["B"], prompt_length, new)
            check_greedy(kata, model, prompt, want, use_cache=True)


# --------------------------------------------------------------------------- training

# A small fixed corpus, characters as tokens (15 of them). Its empirical conditional
# entropies: 2.36 nats from no context, 0.94 from the previous character, 0.37 from the two
# before: a model below 0.94 uses more context than one token, through its attention.
CORPUS = (
    "the cat sat on the mat. the dog sat on the log. "
    "a cat and a dog sat on a mat and a log. "
    "the cat saw the dog and the dog saw the cat. "
)
TRAIN = {"d_model": 32, "num_heads": 4, "num_layers": 2, "T": 16, "B": 16, "steps": 120, "lr": 1e-2}
THRESHOLD = 0.7


def gpt2_initialise(gen):
    """GPT-2's initialisation in float64: Linear and Embedding weights N(0, 0.02^2), biases 0,
    LayerNorm weights 1."""

    @torch.no_grad()
    def initialise(reference: Reference) -> None:
        for sub in reference.modules():
            for name, p in sub.named_parameters(recurse=False):
                if isinstance(sub, nn.LayerNorm) and name == "weight":
                    p.fill_(1.0)
                elif name == "bias":
                    p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.02)

    return initialise


def test_training_with_adam_brings_the_loss_below_the_threshold(kata, rng, gen):
    """120 steps of Adam (lr 1e-2) on batches of 16 random windows of 16 characters of CORPUS,
    through forward(input_ids, targets) with targets = input_ids shifted by one (shifted here,
    by the caller); then the loss over every window must be below 0.7, under the 0.94 nats a
    model of the previous character alone can reach.

    The model starts from GPT-2's initialisation (copied in by name, so every correct model
    starts alike). Measured over 20 seeds (0-19): the solution ends at 0.26-0.39, the
    variants at 0.26-0.39 and 0.25-0.39, each run 0.5-0.7 s of CPU (one thread, as every
    test here; under 1.3 s wall on a busy two-core machine). The steps call nn.Module.__call__ directly, outside
    the forbidden-call guard, which slows every op about 6x: every other test runs forward
    under it. No replay diagnoses a failure here: training every known slip again would
    outlast the test's time limit; the message names what to check instead."""
    chars = sorted(set(CORPUS))
    data = torch.tensor([chars.index(c) for c in CORPUS])
    s = TRAIN
    case = Case(
        "training",
        {
            "B": s["B"],
            "T": s["T"],
            "V": len(chars),
            "E": s["d_model"],
            "H": s["num_heads"],
            "layers": s["num_layers"],
            "M": s["T"],
            "F": 4 * s["d_model"],
        },
    )
    windows = torch.stack([data[i : i + s["T"] + 1] for i in range(len(data) - s["T"])])  # (W, T + 1)
    with case.judged():
        model = build(kata, gen, rng, case, defaults=True, initialise=gpt2_initialise(gen))
        module = model.module.train()
        shape = torch.empty(s["B"], s["T"], dtype=torch.int64)
        text = forward_text(model, shape, targets=shape)
        optimizer = torch.optim.Adam(module.parameters(), lr=s["lr"])
        with torch.no_grad():
            start = nn.Module.__call__(module, windows[:, :-1], targets=windows[:, 1:])[1]
        began = time.process_time()
        for _ in range(s["steps"]):
            batch = windows[torch.randint(len(windows), (s["B"],), generator=gen)]
            loss = nn.Module.__call__(module, batch[:, :-1], targets=batch[:, 1:])[1]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            end = nn.Module.__call__(module, windows[:, :-1], targets=windows[:, 1:])[1]
        spent = time.process_time() - began
        if not bool(end < THRESHOLD):
            raise AssertionError(
                f"after {s['steps']} steps of Adam (lr {s['lr']}) through {text}, the loss over the corpus is "
                f"{float(end):.3f} (it started at {float(start):.3f}, ln V = {math.log(len(chars)):.3f}); a correct "
                f"model gets below {THRESHOLD} (measured at most 0.39). Does every parameter get its gradient (nothing "
                f"detached)? Is the loss the mean over the positions as given? ({spent:.1f} s of CPU)"
            )

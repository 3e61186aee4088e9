"""grouped_query_attention: judged against F.scaled_dot_product_attention(..., enable_gqa=True).

PyTorch has no GQA module, so the reference is a small float64 module below (Reference),
built from PyTorch's own pieces: nn.Linear q_proj, k_proj, v_proj, o_proj around
F.scaled_dot_product_attention(q, k, v, enable_gqa=True), which lets query head h read
kv head h // (H / KV). Every parameter is random (judge.testing.modules.randomise_) and
copied into the learner's module by name. Masks follow F.scaled_dot_product_attention
(boolean True = may attend, float added); a query row whose every key is blocked, in any
head, is never judged (the output row mixes every head through o_proj).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from judge.forbidden import ATTENTION
from judge.testing import modules_mirrored as modules
from judge.testing.checks import assert_close, assert_raises_value_error, call_repr
from judge.testing.inputs import randn, random_keep_mask
from judge.testing.modules_mirrored import ModuleKata, module_repr
from judge.testing.spec import CaseTable, KataSpec, dtypes, edge

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]

# (rtol, atol) against the float64 reference rounded to the dtype under test, bias on.
# Measured over 100 seeds, the solution and both variants, no mask, is_causal, and boolean
# and float masks of the three shapes ([T, T], [B, 1, T, T], [B, H, T, T]):
# - float32 (6 edge cases + 3 draws per seed): worst |error| 1.9e-6, at most 0.13 of
#   torch.testing's single-op defaults kept here (7x headroom);
# - float16 / bfloat16 (3 draws per seed): worst |error| 7.8e-3 / 3.1e-2, at most 0.64 /
#   0.72 of the single-op half tolerances (4e-3 / 3e-2): four projections in half precision
#   compound, so these are widened to MODULE_TOLERANCES' 1.5e-2 / 1e-1 (about 0.17 / 0.22
#   of them: 5x headroom).
# The subtlest slips (.repeat for .repeat_interleave, 1/sqrt(E)) are off by far more and
# are caught in float64 (the edge cases run there), whose tolerance stays tight.
TOLERANCES = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float16: {"rtol": 1.5e-2, "atol": 1.5e-2},
    torch.bfloat16: {"rtol": 1e-1, "atol": 1e-1},
}

# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """B batch, T length, E = H * hs, H query heads, KV kv heads (H = KV * G). The first draw
    is grouped (KV >= 2 and G >= 2: where .repeat differs from .repeat_interleave), the second
    multi-query (KV = 1) or multi-head (KV = H); B, T, E and H all differ."""
    cases = []
    for index in range(count):
        if index == 0:
            KV, G = rng.randint(2, 3), rng.randint(2, 3)
        elif index == 1:
            KV, G = rng.choice([(1, rng.randint(2, 5)), (rng.randint(2, 4), 1)])
        else:
            KV, G = rng.randint(1, 4), rng.randint(1, 3)
        H = KV * G
        hs = rng.choice([n for n in range(2, 8) if n not in (H, KV)])
        E = H * hs
        B, T = rng.sample([n for n in range(2, 10) if n not in (E, H)], 2)
        cases.append({"B": B, "T": T, "E": E, "H": H, "KV": KV})
    return cases


EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge(
        "two kv heads, each shared by two consecutive query heads (.repeat differs from .repeat_interleave)",
        B=2,
        T=5,
        E=12,
        H=4,
        KV=2,
    ),
    edge("multi-query: one kv head for every query head", B=3, T=6, E=6, H=3, KV=1),
    edge("multi-head: as many kv heads as query heads (num_kv_heads left to its default)", B=2, T=4, E=10, H=2, KV=2),
    edge("head size 1, three kv heads", B=2, T=3, E=6, H=6, KV=3),
    edge("one head", B=3, T=4, E=5, H=1, KV=1),
    edge("one sequence, one position", B=1, T=1, E=8, H=4, KV=2),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=3)

# --------------------------------------------------------------------------- the reference


class Reference(nn.Module):
    """GQA from PyTorch's own pieces, in float64: F.scaled_dot_product_attention with
    enable_gqa=True (query head h reads kv head h // (H / KV)) between four nn.Linear."""

    def __init__(self, E: int, H: int, KV: int, bias: bool, dtype=torch.float64, device=None):
        super().__init__()
        self.H, self.KV, self.hs = H, KV, E // H
        kw = {"bias": bias, "dtype": dtype, "device": device}
        self.q_proj = nn.Linear(E, H * self.hs, **kw)
        self.k_proj = nn.Linear(E, KV * self.hs, **kw)
        self.v_proj = nn.Linear(E, KV * self.hs, **kw)
        self.o_proj = nn.Linear(H * self.hs, E, **kw)

    def forward(self, x, attn_mask=None, is_causal=False):
        q = self.q_proj(x).unflatten(-1, (self.H, self.hs)).transpose(1, 2)
        k = self.k_proj(x).unflatten(-1, (self.KV, self.hs)).transpose(1, 2)
        v = self.v_proj(x).unflatten(-1, (self.KV, self.hs)).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).flatten(2))


def defined_rows(B: int, H: int, T: int, attn_mask) -> torch.Tensor | None:
    """[B, T]: True where the query has a key left in EVERY head (o_proj mixes the heads)."""
    if attn_mask is None:
        return None
    mask = attn_mask.cpu()
    allowed = mask if mask.dtype == torch.bool else mask != float("-inf")
    return allowed.expand(B, H, T, T).any(-1).all(1)


def reference_forward(reference, inputs, kwargs):
    x = inputs["x"]
    mask = kwargs.get("attn_mask")
    if mask is not None:
        mask = mask.cpu().double() if mask.is_floating_point() else mask.cpu()
    output = reference(x, attn_mask=mask, is_causal=kwargs.get("is_causal", False)).detach()
    return {"output": output}, defined_rows(x.size(0), reference.H, x.size(1), mask)


def arguments(case, options):
    """num_kv_heads is left to its default (None) when KV = H; bias only when asked."""
    keywords = {} if case["KV"] == case["H"] else {"num_kv_heads": case["KV"]}
    if options.get("bias"):
        keywords["bias"] = True
    return {"embed_dim": case["E"], "num_heads": case["H"]}, keywords


GQA = ModuleKata(
    kata="grouped_query_attention",
    cls="GroupedQueryAttention",
    asks="q_proj (E -> H*hs), k_proj and v_proj (E -> KV*hs), o_proj (H*hs -> E), each nn.Linear with bias=bias",
    inputs=("x",),
    reference=lambda case, options: Reference(case["E"], case["H"], case["KV"], options.get("bias", False)),
    parameters=lambda reference: dict(reference.named_parameters()),
    arguments=arguments,
    forward=reference_forward,
    tolerances=TOLERANCES,
    nan_hint=modules.SDPA_NAN_HINT,
)


def benchmark(kata, device):
    """(kata call, reference call): causal self-attention at batch 8, length 128, embed_dim 512,
    8 query heads sharing 2 kv heads (Llama 2 70B's ratio of 4), float32, eval() mode."""
    B, T, E, H, KV = 8, 128, 512, 8, 2
    reference = Reference(E, H, KV, bias=False, dtype=torch.float32, device=device).eval()
    module = kata.GroupedQueryAttention(E, H, num_kv_heads=KV)
    modules.load_parameters(module, dict(reference.named_parameters()), what=GQA.cls, asks=GQA.asks)
    module.to(device).eval()
    x = randn(torch.Generator().manual_seed(0), B, T, E, device=device)
    return (lambda: module(x, is_causal=True)), (lambda: reference(x, is_causal=True))


SPEC = KataSpec(
    kata="grouped_query_attention",
    symbol="GroupedQueryAttention",
    reference="F.scaled_dot_product_attention(..., enable_gqa=True) between nn.Linear q/k/v/o projections, "
    "in float64, its parameters copied in",
    forbidden=ATTENTION,
    tolerances=TOLERANCES,
    tolerance_note="float32: PyTorch's single-op defaults, solution and variants measured at most 0.13 of them; "
    "half precision: four projections compound, 1.5e-2 / 0.1, measured at most 0.17 / 0.22 of them",
    cases=CASES,
    benchmark=benchmark,
)

# --------------------------------------------------------------------------- helpers


def build(kata, gen, case, dtype=torch.float32, device="cpu", *, bias=False):
    return modules.build(GQA, kata, gen, case, {"bias": bias}, dtype, device)


def make_x(gen, case, dtype=torch.float32, device="cpu"):
    return {"x": randn(gen, case["B"], case["T"], case["E"], dtype=dtype, device=device)}


def mask_shapes(case) -> list[list[int]]:
    """The three shapes a mask broadcastable to [B, H, T, T] takes in practice."""
    B, H, T = case["B"], case["H"], case["T"]
    return [[T, T], [B, 1, T, T], [B, H, T, T]]


def keep_mask(gen, shape) -> torch.Tensor:
    """Boolean, True = may attend, every row keeping at least one key."""
    return random_keep_mask(gen, *shape)


def float_mask(gen, shape, dtype) -> torch.Tensor:
    """Finite random values where a key is kept, -inf where it is blocked."""
    return randn(gen, *shape, dtype=dtype, std=0.5).masked_fill(~keep_mask(gen, shape), float("-inf"))


def check(built, inputs, **kwargs):
    modules.check(GQA, built, inputs, **kwargs)


def check_raises(built, inputs, *, reason: str, **kwargs):
    """The call must raise ValueError; a slip that returns normally is diagnosed by replaying it."""
    text = call_repr(built.name, *inputs.values(), **kwargs)

    def attempt(module):
        assert_raises_value_error(lambda: module(*inputs.values(), **kwargs), call=text, reason=reason)
        return {}

    with SPEC.diagnosing(lambda implementation: attempt(built.remake(implementation)), built.case):
        attempt(built.module)


# --------------------------------------------------------------------------- tests


@dtypes(*FULL)
def test_matches_sdpa_with_enable_gqa(kata, rng, gen, dtype, device):
    """Without a mask; bias on in every other case, so both settings run on the edge cases."""
    for index, case in enumerate(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            built = build(kata, gen, case, dtype, device, bias=index % 2 == 1)
            check(built, make_x(gen, case, dtype, device))


@dtypes(*FULL)
def test_boolean_attn_mask_true_means_may_attend(kata, rng, gen, dtype, device):
    """[T, T], [B, 1, T, T] and [B, H, T, T]: False blocks the key (F.scaled_dot_product_attention's polarity)."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(kata, gen, case, dtype, device, bias=rng.random() < 0.5)
            inputs = make_x(gen, case, dtype, device)
            for shape in mask_shapes(case):
                check(built, inputs, attn_mask=keep_mask(gen, shape).to(device))


@dtypes(*FULL)
def test_float_attn_mask_is_added_to_the_scores(kata, rng, gen, dtype, device):
    """[T, T], [B, 1, T, T] and [B, H, T, T]: finite random values, -inf where blocked."""
    for case in CASES.cases(rng, edges=dtype == torch.float64):
        with case.judged():
            built = build(kata, gen, case, dtype, device)
            inputs = make_x(gen, case, dtype, device)
            for shape in mask_shapes(case):
                check(built, inputs, attn_mask=float_mask(gen, shape, dtype).to(device))


@dtypes(*FULL)
def test_is_causal_lets_query_i_see_keys_0_to_i(kata, rng, gen, dtype, device):
    for index, case in enumerate(CASES.cases(rng, edges=dtype == torch.float64)):
        with case.judged():
            built = build(kata, gen, case, dtype, device, bias=index % 2 == 0)
            check(built, make_x(gen, case, dtype, device), is_causal=True)


def test_a_query_whose_every_key_is_blocked_is_not_judged(kata, rng, gen):
    """One row of a [B, H, T, T] mask all False: that output row is undefined (NaN, zeros or
    anything else is accepted there); every other row is judged."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case)
    mask = keep_mask(gen, mask_shapes(case)[2])
    b, h, t = rng.randrange(case["B"]), rng.randrange(case["H"]), rng.randrange(case["T"])
    mask[b, h, t] = False
    check(built, make_x(gen, case), attn_mask=mask)


@dtypes(*HALF)
def test_works_in_half_precision_with_masks(kata, rng, gen, dtype):
    """A blocked score must become -inf (or the dtype's lowest): -1e9 does not fit in float16."""
    for case in CASES.random(rng, 2):
        with case.judged():
            built = build(kata, gen, case, dtype, bias=True)
            inputs = make_x(gen, case, dtype)
            check(built, inputs, is_causal=True)
            check(built, inputs, attn_mask=keep_mask(gen, mask_shapes(case)[1]))
            check(built, inputs, attn_mask=float_mask(gen, mask_shapes(case)[2], dtype))


def test_attn_mask_together_with_is_causal_raises_value_error(kata, rng, gen):
    """As F.scaled_dot_product_attention refuses them: boolean and float masks alike."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case)
    inputs = make_x(gen, case)
    reason = "attn_mask and is_causal=True may not be given together"
    for mask in (keep_mask(gen, mask_shapes(case)[0]), float_mask(gen, mask_shapes(case)[1], torch.float32)):
        check_raises(built, inputs, reason=reason, attn_mask=mask, is_causal=True)


def test_embed_dim_not_divisible_by_num_heads_raises_value_error(kata, rng):
    modules.check_heads_must_divide(GQA, kata, rng, "embed_dim", "num_heads")


def test_num_heads_not_a_multiple_of_num_kv_heads_raises_value_error(kata, rng):
    """E.g. 6 query heads over 4 kv heads, and more kv heads than query heads."""
    KV = rng.randint(3, 5)
    H = KV * rng.randint(1, 3) + rng.randint(1, KV - 1)
    for heads, kv_heads in ((H, KV), (2, 4)):
        E = heads * rng.randint(2, 5)

        def attempt(implementation, E=E, heads=heads, kv_heads=kv_heads):
            assert_raises_value_error(
                lambda: implementation.GroupedQueryAttention(E, heads, num_kv_heads=kv_heads),
                call=module_repr(GQA.cls, embed_dim=E, num_heads=heads, num_kv_heads=kv_heads),
                reason=f"{heads} query heads cannot be shared evenly by {kv_heads} kv heads",
            )
            return {}

        with SPEC.diagnosing(attempt, {"E": E, "H": heads, "KV": kv_heads}):
            attempt(kata)


def test_num_kv_heads_defaults_to_num_heads(kata, rng, gen):
    """GroupedQueryAttention(E, H) is plain multi-head attention: k_proj and v_proj E -> E."""
    case = CASES.random(rng)[0]
    case = case | {"KV": case["H"]}
    check(build(kata, gen, case), make_x(gen, case))


def test_has_the_four_projections_with_bias_exactly_when_asked(kata, rng, gen):
    """q_proj, k_proj, v_proj, o_proj; bias=True puts a bias on all four, the default on none."""
    case = CASES.random(rng)[0]
    for bias in (False, True):
        build(kata, gen, case, bias=bias)


def test_gradients_flow_back_to_the_input_like_pytorch(kata, rng, gen):
    """Autograd must see every step: no .detach(), .data or torch.no_grad() inside forward."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case, torch.float64, bias=True)
    x = make_x(gen, case, torch.float64)["x"]
    call = call_repr(built.name, x, is_causal=True) + ".backward"
    upstream = randn(gen, case["B"], case["T"], case["E"], dtype=torch.float64)

    def gradients(module) -> dict:
        mine = x.clone().requires_grad_()
        output = module(mine, is_causal=True)
        if not output.requires_grad:
            raise AssertionError(f"{call}: the output does not require grad; autograd lost track of x")
        (output * upstream).sum().backward()
        if mine.grad is None:
            raise AssertionError(f"{call}: no gradient reached `x`")
        return {"the gradient of `x`": mine.grad}

    twin = x.clone().requires_grad_()
    (built.reference(twin, is_causal=True) * upstream).sum().backward()
    with SPEC.diagnosing(lambda implementation: gradients(built.remake(implementation)), case):
        got = gradients(built.module)
        assert_close(
            got["the gradient of `x`"],
            twin.grad,
            call=call,
            what="the gradient of `x`",
            tolerance=TOLERANCES[torch.float64],
        )


def test_writes_its_own_attention(kata, rng, gen):
    """The spec's forbidden rules refuse PyTorch's attention while the kata runs; here every
    path through forward runs once."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case)
    inputs = make_x(gen, case)
    shape = mask_shapes(case)[0]
    for kwargs in (
        {},
        {"is_causal": True},
        {"attn_mask": keep_mask(gen, shape)},
        {"attn_mask": float_mask(gen, shape, torch.float32)},
    ):
        modules.call(GQA, built, inputs, **kwargs)


def test_results_follow_the_device_of_the_inputs(kata, rng, gen, other_device):
    """A causal mask made inside forward must be made on the inputs' device."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case, device=other_device)
    modules.check_on_device(GQA, built, case, make_x(gen, case, device=other_device), other_device, is_causal=True)


def test_does_not_modify_its_inputs(kata, rng, gen):
    """modules.call checks every call; here with a boolean and a float mask."""
    case = CASES.random(rng)[0]
    built = build(kata, gen, case)
    inputs = make_x(gen, case)
    modules.call(GQA, built, inputs, attn_mask=keep_mask(gen, mask_shapes(case)[2]))
    modules.call(GQA, built, inputs, attn_mask=float_mask(gen, mask_shapes(case)[1], torch.float32))

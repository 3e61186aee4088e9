"""The shared path of the module katas (after PyTorch's ModuleInfo): the attention modules,
layers and blocks whose learner writes an nn.Module mirrored by one of PyTorch's.

A kata declares a ModuleKata: the class the learner writes, PyTorch's module it mirrors,
how parameters are named on each side, and how each side is called. One path then serves
every test: `build` makes PyTorch's module in float64 with EVERY parameter randomised
(LayerNorm weights and biases included, so swapped or reused norms show), rounds them to
the dtype under test and writes down a recipe for the learner's module (its class, its
constructor's arguments, those weights by the kata's names, its dtype, device and mode);
`check` has the recipe built and called where the kata lives (a scenario), then compares
every output, never judging a row whose keys are all blocked.

The reference runs in float64, in train() mode with dropout 0 and autograd on, which keeps
it off PyTorch's fused inference fast path; its result is rounded to the dtype under test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from judge.forbidden import check_structure
from judge.language import tr, tr_data
from judge.testing.checks import (
    Mismatch,
    assert_close,
    call_repr,
    check_tensor_kind,
    describe,
    judge_on_device,
    label,
)
from judge.testing.diagnosis import diagnosing
from judge.testing.functions import assert_inputs_unchanged, named_call, raises
from judge.testing.inputs import causal_blocked, randn
from judge.testing.scenarios import scenario
from judge.testing.spec import CaseTable, core_dtype, edge
from judge.testing.tolerances import per_dtype

# (rtol, atol) for a layer's result in the given dtype, compared with the float64 reference
# rounded to that dtype. A layer chains matmuls, a softmax and up to three LayerNorms, so
# these are wider than torch.testing's single-op defaults. float32, measured over 150 seeds
# x 7 cases (the edge cases included) on the solutions and every variant: the GPT-2 block
# reaches 0.15 of MODULE_TOLERANCES (GELU and LayerNorms over 3 values are its worst). The
# encoder and decoder layers once had a third of these in float32 (0.14 of it measured), until
# seed 392488 drew d_model 2 with eps 0.004 after a post-norm: a LayerNorm over two values,
# whose float32 rounding the solution itself took to 1.6 of that third (0.55 of these).
# Half precision: measured on the random draws (the edge cases run in float64).
# The subtlest float32 mutant (tanh GELU) is off by >3e-4, and every slip is caught in
# float64, whose tolerance stays tight.
MODULE_TOLERANCES = per_dtype(
    float64=(1e-7, 1e-7), float32=(3e-5, 6e-5), float16=(1.5e-2, 1.5e-2), bfloat16=(1e-1, 1e-1)
)

# --------------------------------------------------------------------------- the case table


def hidden_sizes(rng, count: int) -> list[dict]:
    """Sizes in which B, L, S and E all differ and the head size differs from the head count.

    B batch, L query (target) length, S key/memory length, E = H * hs model width, H heads,
    F feed-forward width (odd, wider than E). The first case has L < S before one of its
    B, L, S is set to 1; the second has L > S, at least two heads and an odd head size.
    """
    cases = []
    for index in range(count):
        H = rng.randint(2, 5) if index == 1 else rng.randint(1, 5)
        head_sizes = [n for n in range(2, 10) if n != H and (index != 1 or n % 2 == 1)]
        hs = rng.choice(head_sizes)
        E = H * hs
        B, L, S = rng.sample([n for n in range(2, 14) if n != E], 3)
        if index < 2 and (L < S) != (index == 0):
            L, S = S, L
        F_ = rng.choice([n for n in range(E + 1 + E % 2, 3 * E + 8, 2) if n not in (B, L, S)])
        cases.append({"B": B, "L": L, "S": S, "E": E, "H": H, "F": F_})
    cases[0][rng.choice("BLS")] = 1
    return cases


# Named edge cases every module kata runs every time, beside the random draws: the sizes
# where a slip in splitting heads, broadcasting masks or aligning queries shows.
EDGES = (  # the most telling first: the first failure shown is the first edge case that fails
    edge("odd head size, more queries than keys", "奇数的头维度，查询比键多", B=2, L=7, S=3, E=10, H=2, F=13),
    edge("head size 1", "头维度为 1", B=2, L=4, S=6, E=3, H=3, F=5),
    edge("one head", "只有一个头", B=3, L=5, S=4, E=5, H=1, F=7),
    edge("one sequence, one position", "一条序列，一个位置", B=1, L=1, S=1, E=6, H=2, F=9),
)
CASES = CaseTable(draw=hidden_sizes, edges=EDGES, draws=2)


def with_causal(mask: torch.Tensor | None, L: int, S: int) -> torch.Tensor:
    """The explicit mask PyTorch needs where the kata gets is_causal=True (plus `mask`)."""
    causal = causal_blocked(L, S)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask.cpu() | causal
    return mask.cpu().masked_fill(causal, float("-inf"))


def reference_masks(attn_mask, key_padding_mask, L: int, S: int, is_causal: bool = False):
    """(attn_mask, key_padding_mask) as PyTorch's modules need them, on the CPU: is_causal made
    an explicit mask (PyTorch takes is_causal only as a hint about attn_mask), float masks in
    float64, and a boolean mask made 0/-inf when the other one is float (PyTorch wants one kind)."""
    if is_causal:
        attn_mask = with_causal(attn_mask, L, S)
    masks = [None if m is None else m.cpu() for m in (attn_mask, key_padding_mask)]
    if any(m is not None and m.is_floating_point() for m in masks):
        masks = [
            None
            if m is None
            else m.double()
            if m.is_floating_point()
            else torch.zeros(m.shape, dtype=torch.float64).masked_fill(m, float("-inf"))
            for m in masks
        ]
    return masks[0], masks[1]


def allowed(mask: torch.Tensor | None) -> torch.Tensor | None:
    """True where a key may be attended to, for a boolean (True = blocked) or float mask."""
    if mask is None:
        return None
    mask = mask.cpu()
    return ~mask if mask.dtype == torch.bool else mask != float("-inf")


def defined_rows(B: int, L: int, S: int, attn_mask=None, key_padding_mask=None) -> torch.Tensor:
    """[B, L]: True where a query has at least one key left. Other rows are undefined."""
    keep = torch.ones(B, L, S, dtype=torch.bool)
    if attn_mask is not None:
        keep = keep & allowed(attn_mask)
    if key_padding_mask is not None:
        keep = keep & allowed(key_padding_mask)[:, None, :]
    return keep.any(-1)


# --------------------------------------------------------------------------- reference modules


@torch.no_grad()
def randomise_(module: nn.Module, gen: torch.Generator, dtype) -> nn.Module:
    """Every parameter random, then rounded to `dtype` (the module itself stays float64):
    Linear weights N(0, 1/fan_in), norm weights (LayerNorm, RMSNorm, of any shape)
    1 + N(0, 0.4^2), biases N(0, 0.4^2). Activations stay O(1) and the attention weights
    spread out instead of saturating."""
    for sub in module.modules():
        for name, p in sub.named_parameters(recurse=False):
            if isinstance(sub, (nn.LayerNorm, nn.RMSNorm)) and name == "weight":
                value = 1 + randn(gen, *p.shape, dtype=torch.float64, std=0.4)
            elif p.dim() == 2:
                value = randn(gen, *p.shape, dtype=torch.float64, std=p.shape[1] ** -0.5)
            else:
                value = randn(gen, *p.shape, dtype=torch.float64, std=0.4)
            p.copy_(value.to(dtype).double())
    return module.train()  # with dropout 0: identical to eval(), and never the fast path


def attention_parameters(prefix: str, mha: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    """nn.MultiheadAttention's parameters under the kata's names: the packed in_proj_weight
    [3E, E] (and in_proj_bias [3E]) split in q, k, v order into q_proj, k_proj, v_proj."""
    out = {}
    for part, weight in zip(("q_proj", "k_proj", "v_proj"), mha.in_proj_weight.chunk(3)):
        out[f"{prefix}{part}.weight"] = weight
    if mha.in_proj_bias is not None:
        for part, bias in zip(("q_proj", "k_proj", "v_proj"), mha.in_proj_bias.chunk(3)):
            out[f"{prefix}{part}.bias"] = bias
    for name, p in mha.out_proj.named_parameters():
        out[f"{prefix}out_proj.{name}"] = p
    return out


def renamed(module: nn.Module, names: dict[str, str]) -> dict[str, torch.Tensor]:
    """The parameters of `module`'s submodules, each under the kata's name for it."""
    out = {}
    for theirs, ours in names.items():
        for name, p in module.get_submodule(theirs).named_parameters():
            out[f"{ours}.{name}"] = p
    return out


# --------------------------------------------------------------------------- the learner's module


def made(kata, recipe: dict):
    """(the learner's module built from a recipe, None), or (None, what its parameters look
    like) when they do not match the recipe's by name and shape. Runs where the kata lives."""
    module = getattr(kata, recipe["cls"])(*recipe["positional"], **recipe["keywords"]).to(recipe["dtype"])
    check_structure(module)
    have = dict(module.named_parameters())
    state = recipe["state"]
    if set(have) != set(state) or any(list(have[n].shape) != list(state[n].shape) for n in state):
        submodules = {name: type(sub).__name__ for name, sub in module.named_modules()}
        return None, {"parameters": {n: list(p.shape) for n, p in have.items()}, "submodules": submodules}
    load_state(module, state)
    return module.to(recipe["device"]).train(recipe["train"]), None


def load_state(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """Copy `state` (name -> tensor, names and shapes already checked) into the module's parameters."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(state[name].to(p.dtype))
    return module


def parameter_problem(expected: dict, found: dict, *, what: str, asks: str, built: str) -> str:
    """Why the learner's parameters (found: {"parameters": {name: shape}, "submodules": {name:
    type}}) do not match the recipe's `expected` ones: the first missing submodule or parameter,
    a parameter of the wrong shape, or one the reference has no counterpart for."""
    have, submodules = found["parameters"], found["submodules"]
    for name, tensor in expected.items():
        if name in have:
            continue
        *path, leaf = name.split(".")
        for depth in range(1, len(path) + 1):
            if ".".join(path[:depth]) not in submodules:
                where = ".".join([what, *path[: depth - 1]])
                return tr(
                    "{where} has no submodule `{name}`; the kata asks for {asks}",
                    where=where,
                    name=path[depth - 1],
                    asks=asks,
                )
        return tr(
            "{where} has no parameter `{name}` (expected one of shape {shape})",
            where=".".join([built, *path]),
            name=leaf,
            shape=list(tensor.shape),
        ) + (tr("; with bias=True every Linear and LayerNorm has a bias") if leaf == "bias" else "")
    for name, shape in have.items():
        if name not in expected:
            return tr(
                "{built} has a parameter `{name}` of shape {shape} that PyTorch's module has no counterpart for; "
                "the kata asks for {asks}",
                built=built,
                name=name,
                shape=shape,
                asks=asks,
            ) + (tr(" (with bias=False: no bias in any Linear or LayerNorm)") if name.endswith("bias") else "")
        if list(shape) != list(expected[name].shape):
            return tr(
                "{built}.{name} has shape {shape}, expected {want} (nn.Linear(in, out) keeps its weight as [out, in])",
                built=built,
                name=name,
                shape=shape,
                want=list(expected[name].shape),
            )
    return "the parameters do not match"  # not reached: the kata process found a difference


# --------------------------------------------------------------------------- scenarios (run where the kata lives)


@scenario
def forward(kata, recipe: dict, inputs: dict, kwargs: dict) -> dict:
    """The learner's module built from the recipe, called once: its result, and the inputs as
    the call left them."""
    module, problem = made(kata, recipe)
    if problem:
        return problem
    result = module(*inputs.values(), **kwargs)
    return {"result": result, "inputs": inputs, "kwargs": kwargs}


@scenario
def forward_twice(kata, recipe: dict, inputs: dict) -> dict:
    """Two calls of the same module in a row (in train() mode, dropout draws twice)."""
    module, problem = made(kata, recipe)
    if problem:
        return problem
    return {"results": [module(*inputs.values()), module(*inputs.values())]}


@scenario
def gradients(kata, recipe: dict, inputs: dict, kwargs: dict, upstream, output: int | None) -> dict:
    """The gradients of the inputs through the learner's module: result[output] (or the result)
    dotted with `upstream`, then backward."""
    module, problem = made(kata, recipe)
    if problem:
        return problem
    leaves = {name: tensor.detach().requires_grad_() for name, tensor in inputs.items()}
    result = module(*leaves.values(), **kwargs)
    chosen = result if output is None else result[output]
    if not isinstance(chosen, torch.Tensor) or not chosen.requires_grad:
        return {"requires_grad": False, "grads": {}}
    (chosen * upstream).sum().backward()
    return {"requires_grad": True, "grads": {name: leaf.grad for name, leaf in leaves.items()}}


@scenario
def parts(kata, recipe: dict, probes: list) -> dict:
    """Each probed submodule of the learner's module called alone: probes are (submodule name,
    how to call it, args, kwargs); None where the call raised."""
    module, problem = made(kata, recipe)
    if problem:
        return problem
    outputs = []
    with torch.no_grad():
        for name, call, args, kwargs in probes:
            try:
                outputs.append(call(module.get_submodule(name), args, kwargs))
            except Exception:  # noqa: BLE001 - a hint only: the learner's parts may not be callable this way
                outputs.append(None)
    return {"outputs": outputs}


# --------------------------------------------------------------------------- judging


# Why a NaN appears where PyTorch has a number, for the masks of nn.* modules (True = blocked).
NN_NAN_HINT = (
    "NaN usually comes from a softmax over a row of -inf, a query whose every key was blocked: here a boolean "
    "mask is True where attention is BLOCKED (the opposite of F.scaled_dot_product_attention), and "
    "key_padding_mask [B, S] blocks keys, not queries"
)
# The same for the masks of F.scaled_dot_product_attention (True = may attend).
SDPA_NAN_HINT = (
    "NaN usually comes from a softmax over a row of -inf, a query whose every key was blocked: here, as in "
    "F.scaled_dot_product_attention, a boolean attn_mask is True where a query MAY attend (False blocks), and "
    "is_causal blocks only the keys j > i (query i always sees key i)"
)


def rows_of(defined: torch.Tensor, what: str) -> torch.Tensor:
    """The defined rows [B, L] shaped to select in a result: [B, L, 1], or [B, 1, L, 1] for the
    attention weights [B, H, L, S]."""
    return defined[:, None, :, None] if what == "weights" else defined[:, :, None]


def assert_close_where_defined(
    actual, expected: torch.Tensor, defined, *, call: str, what: str, tolerances: Mapping, nan_hint: str = NN_NAN_HINT
) -> None:
    """assert_close, skipping undefined rows; a NaN where PyTorch has a number is explained
    with `nan_hint`.

    `defined` is [B, L]; `expected` is [B, L, ...] or [B, H, L, S] ("weights")."""
    check_tensor_kind(actual, expected, call=call, what=what)
    tolerance = tolerances[expected.dtype]
    project = None
    if defined is not None and not bool(defined.all()):
        keep = rows_of(defined, what).to(expected.device)
        zero = torch.zeros((), dtype=expected.dtype, device=expected.device)

        def project(value):
            return torch.where(keep, value, zero)

        actual, expected = project(actual), project(expected)
    nan = torch.isnan(actual.detach().cpu()) & ~torch.isnan(expected.cpu())
    if nan.any():
        where = tuple(int(i) for i in nan.nonzero()[0])
        raise Mismatch(
            tr(
                "{call} returned {what} with NaN at index {where} ({count} of {total} elements) "
                "where PyTorch gives {want}. {hint}",
                call=call,
                what=label(what),
                where=where,
                count=int(nan.sum()),
                total=nan.numel(),
                want=f"{expected[where].item():.6g}",
                hint=tr_data(nan_hint),
            ),
            what=what,
            actual=actual,
            expected=expected,
            tolerance=tolerance,
            project=project,
        )
    assert_close(actual, expected, call=call, what=what, tolerance=tolerance, project=project)


def assert_dropout_is_active(first: torch.Tensor, second: torch.Tensor, *, call: str) -> None:
    if torch.equal(first, second):
        raise AssertionError(
            tr(
                "two calls of {call} in train() mode returned the same output; with dropout > 0 training "
                "should zero random activations, so two calls differ (use nn.Dropout or F.dropout with "
                "training=self.training)",
                call=call,
            )
        )


def module_repr(name: str, **kwargs) -> str:
    """How the module was built, e.g. `TransformerEncoderLayer(d_model=12, nhead=3, norm_first=True)`."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


# --------------------------------------------------------------------------- one path for every module kata


def call_attention(attention: nn.Module, args: list, kwargs: dict):
    """An attention submodule called as the stubs declare it: (query, key, value, attn_mask,
    key_padding_mask); its output (the first of a pair)."""
    out = attention(*args[:3], kwargs.get("attn_mask"), kwargs.get("key_padding_mask"))
    return out[0] if isinstance(out, tuple) else out


def call_attention_as_the_layer_does(attention: nn.Module, args: list, kwargs: dict):
    """The learner's attention submodule called as its layer calls it (query, key, value,
    attn_mask, key_padding_mask, is_causal), on the inputs PyTorch's got, given back in the
    kata's terms: 0/-inf float masks (PyTorch's layers make them of boolean ones) become
    True = blocked again, and a mask that blocks every key j > i becomes is_causal=True plus
    what it blocks besides. The same attention for a right implementation; a slip in its
    own mask handling (polarity, the causal diagonal) shows here instead of passing for a
    slip in how the layer is put together."""
    query, key = args[0], args[1]
    masks = []
    for mask in (kwargs.get("attn_mask"), kwargs.get("key_padding_mask")):
        if mask is not None and mask.is_floating_point() and bool(((mask == 0) | (mask == float("-inf"))).all()):
            mask = mask == float("-inf")
        masks.append(mask)
    attn_mask, key_padding_mask = masks
    is_causal = False
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        future = causal_blocked(query.size(1), key.size(1)).to(attn_mask.device)
        if bool(attn_mask[future].all()):
            rest = attn_mask & ~future
            attn_mask, is_causal = (rest if bool(rest.any()) else None), True
    out = attention(query, key, args[2], attn_mask, key_padding_mask, is_causal)
    return out[0] if isinstance(out, tuple) else out


def layer_attention_probe(name: str) -> Probe:
    """The learner's attention submodule `name` of a 2017 layer, called as the layer calls it."""
    return Probe(name, name, call_attention_as_the_layer_does)


@dataclass(frozen=True)
class Probe:
    """One part of a layer, checked on its own when the layer's output is wrong: the learner's
    submodule `learner` is called (by `call(submodule, args, kwargs)`, a module-level function:
    it runs where the kata lives) with the very inputs PyTorch's `reference` submodule received
    in the reference's forward, and its result is compared with what PyTorch's `output_of`
    submodule (by default the same) returned."""

    learner: str
    reference: str
    call: Callable
    output_of: str | None = None


def attention_probe(name: str) -> Probe:
    """The learner's attention submodule `name`, called as the stubs declare it (query, key,
    value, attn_mask, key_padding_mask), on the inputs and the explicit masks PyTorch's got."""
    return Probe(name, name, call_attention)


@dataclass(frozen=True)
class ModuleKata:
    """How a module kata mirrors its PyTorch module.

    kata: its name. cls: the class the learner writes. asks: its submodules, for messages.
    inputs: forward's tensor arguments in order. reference(case, options): PyTorch's module
    in float64. parameters(reference): its parameters under the kata's names.
    arguments(case, options): the learner's constructor call, ({name: positional value},
    {keyword: value}). forward(reference, inputs, kwargs): PyTorch's result, ({what: expected
    or None}, defined [B, L]). outputs(result, call, kwargs): the learner's result as {what:
    tensor}, after checking its form. output: which element of the learner's result carries
    gradients back (None: the result itself). tolerances: per dtype. probes:
    the parts of a layer to run alone when its output is wrong. nan_hint: why a NaN appears,
    in the terms of the kata's mask polarity."""

    kata: str
    cls: str
    asks: str
    inputs: tuple[str, ...]
    reference: Callable
    parameters: Callable
    arguments: Callable
    forward: Callable
    outputs: Callable = lambda result, call, kwargs: {"output": result}
    output: int | None = None
    tolerances: Mapping = field(default_factory=lambda: MODULE_TOLERANCES)
    probes: tuple[Probe, ...] = ()
    nan_hint: str = NN_NAN_HINT


@dataclass
class Built:
    """What the learner's module is built from (`recipe`: plain data, sent where the kata lives),
    the float64 reference it mirrors, how the module was built (for messages) and its case."""

    recipe: dict
    reference: nn.Module
    name: str
    case: dict

    def mode(self, train: bool) -> Built:
        """The same module in train() (True) or eval() (False) mode."""
        name = self.name.removesuffix(".eval()").removesuffix(".train()")
        return Built(
            self.recipe | {"train": train}, self.reference, name + (".train()" if train else ".eval()"), self.case
        )


def build(mk: ModuleKata, gen, case, options: dict, dtype=torch.float32, device="cpu", *, train: bool = False) -> Built:
    reference = randomise_(mk.reference(case, options), gen, dtype)
    positional, keywords = mk.arguments(case, options)
    name = module_repr(mk.cls, **positional, **keywords)
    if not train and keywords.get("dropout"):
        name += ".eval()"
    state = {name_: p.detach().to(dtype) for name_, p in mk.parameters(reference).items()}
    recipe = {
        "cls": mk.cls,
        "positional": list(positional.values()),
        "keywords": keywords,
        "state": state,
        "dtype": dtype,
        "device": str(device),
        "train": train,
    }
    return Built(recipe, reference, name, dict(case))


def built_module(mk: ModuleKata, built: Built, got: dict) -> dict:
    """A scenario's answer, after refusing parameters that do not match the recipe's."""
    if "parameters" in got:
        raise AssertionError(parameter_problem(built.recipe["state"], got, what=mk.cls, asks=mk.asks, built=built.name))
    return got


def run(mk: ModuleKata, implementation, built: Built, inputs: dict, kwargs: dict) -> tuple[str, dict, dict]:
    """One forward where `implementation` lives: (how the call looked, the outputs {what:
    value}, the tensor arguments as the call left them {name: value})."""
    text = call_repr(built.name, *inputs.values(), **kwargs)
    try:
        got = built_module(mk, built, forward(implementation, built.recipe, inputs, kwargs))
    except Exception as error:
        named_call(error, text)
        raise
    return text, mk.outputs(got["result"], text, kwargs), got["inputs"] | got["kwargs"]


def replay(mk: ModuleKata, built: Built, inputs: dict, kwargs: dict) -> Callable[[object], dict]:
    """The same call with another implementation's module (same recipe), for the diagnosis."""
    return lambda implementation: run(mk, implementation, built, inputs, kwargs)[1]


def call(mk: ModuleKata, kata, built: Built, inputs: dict, **kwargs) -> tuple[str, dict]:
    """(how the call looked, the learner's outputs), diagnosed if it raises."""
    with diagnosing(mk.kata, replay(mk, built, inputs, kwargs), built.case):
        text, got, _ = run(mk, kata, built, inputs, kwargs)
    return text, got


def check(mk: ModuleKata, kata, built: Built, inputs: dict, *, float64_throughout: bool = False, **kwargs) -> None:
    """The learner's outputs against PyTorch's, on the rows where they are defined: float64
    results with float32's tolerance unless float64_throughout (see spec.FLOAT64_RULE)."""
    tolerances = {dtype: mk.tolerances[core_dtype(dtype, float64_throughout)] for dtype in mk.tolerances}
    want, defined = mk.forward(built.reference, {k: t.detach().cpu().double() for k, t in inputs.items()}, kwargs)
    first = next(iter(inputs.values()))
    tolerances = as_far_as_pytorch(mk, built, inputs, kwargs, want, defined, tolerances)
    try:
        with diagnosing(mk.kata, replay(mk, built, inputs, kwargs), built.case):
            text, got, _ = run(mk, kata, built, inputs, kwargs)
            for what, expected in want.items():
                if expected is None:
                    if got.get(what) is not None:
                        shown = describe(got[what])
                        raise AssertionError(
                            tr("{call} returned {what} {got}; expected None", call=text, what=what, got=shown)
                        )
                    continue
                expected = expected.to(dtype=first.dtype, device=first.device)
                assert_close_where_defined(
                    got[what], expected, defined, call=text, what=what, tolerances=tolerances, nan_hint=mk.nan_hint
                )
    except Mismatch as error:
        if mk.probes and not error.kind_only and hasattr(error, "kata_diagnosis"):
            error.kata_diagnosis = [*error.kata_diagnosis, *_step_by_step(mk, kata, built, inputs, kwargs, defined)]
        raise


HONEST_FACTOR = 2.0  # in half precision, a correct kata may land this many times as far as PyTorch's own module


def as_far_as_pytorch(
    mk: ModuleKata, built: Built, inputs: dict, kwargs: dict, want: dict, defined, tolerances: Mapping
) -> Mapping:
    """In float16 and bfloat16, the tolerance widened to HONEST_FACTOR times what PyTorch's own
    module in that dtype needs on this very case, where that is more than the tolerance. Some
    draws are ill-conditioned: a LayerNorm over a few nearly equal values (d_model 2 to 6, eps
    1e-3) multiplies the rounding of its input. With the fixed tolerance alone, the decoder and
    encoder layers' solutions failed about one draw in 700 (2,000 seeds each; seed 296560 of the
    suite: 2.3 times bfloat16's). Measured on the decoder layer and the GPT-2 block, 1,500-2,000
    seeds each: widened on 0.1-0.2% of the checks, by up to 3.3 (bfloat16) and 5.8 (float16)
    times, and no solution failed. Where PyTorch's module runs well within the tolerance, it is
    unchanged; where PyTorch's module cannot run in that dtype, too. Only the rows where the
    result is defined count (see assert_close_where_defined)."""
    dtype = next(iter(inputs.values())).dtype
    if dtype not in (torch.float16, torch.bfloat16) or dtype not in tolerances:
        return tolerances
    try:
        own, _ = mk.forward(
            copy.deepcopy(built.reference).to(dtype), {k: t.detach().cpu() for k, t in inputs.items()}, kwargs
        )
    except Exception:  # noqa: BLE001 - PyTorch's module cannot run in this dtype here: the fixed tolerance
        return tolerances
    tolerance, used = tolerances[dtype], 0.0
    for what, expected in want.items():
        got = own.get(what)
        if expected is None or got is None or got.shape != expected.shape:
            continue
        error = (got.double() - expected).abs() / (tolerance["atol"] + tolerance["rtol"] * expected.abs())
        if defined is not None:
            error = torch.where(rows_of(defined, what), error, torch.zeros((), dtype=error.dtype))
        used = max(used, float(torch.nan_to_num(error, nan=0.0).max()) if error.numel() else 0.0)
    scale = HONEST_FACTOR * used
    if scale <= 1:
        return tolerances
    return {**tolerances, dtype: {"rtol": tolerance["rtol"] * scale, "atol": tolerance["atol"] * scale}}


def assert_inputs_left_alone(mk: ModuleKata, kata, built: Built, inputs: dict, **kwargs) -> None:
    """A convention: forward never changes its tensor arguments in place (checked by value here)."""

    def check(implementation) -> dict:
        text, _, after = run(mk, implementation, built, inputs, kwargs)
        assert_inputs_unchanged(text, inputs | kwargs, after)
        return {}

    with diagnosing(mk.kata, check, built.case):  # an in-place slip is named: its replay fails the same way
        check(kata)


def _step_by_step(mk: ModuleKata, kata, built: Built, inputs: dict, kwargs: dict, defined) -> list[str]:
    """'step by step, on PyTorch's own inputs to each part: your self_attn matches; ...'."""
    try:
        captured = {}
        hooks = []
        for probe in mk.probes:
            for name in {probe.reference, probe.output_of or probe.reference}:

                def hook(module, args, kw, output, name=name):
                    captured.setdefault(name, (args, kw, output[0] if isinstance(output, tuple) else output))

                hooks.append(built.reference.get_submodule(name).register_forward_hook(hook, with_kwargs=True))
        try:
            mk.forward(built.reference, {k: t.detach().cpu().double() for k, t in inputs.items()}, kwargs)
        finally:
            for handle in hooks:
                handle.remove()
        first = next(iter(inputs.values()))

        def cast(value):
            if not isinstance(value, torch.Tensor):
                return value
            value = value.detach().to(first.device)
            return value.to(first.dtype) if value.is_floating_point() else value

        probes = []
        for probe in mk.probes:
            args, kw, _ = captured[probe.reference]
            probes.append((probe.learner, probe.call, [cast(a) for a in args], {k: cast(v) for k, v in kw.items()}))
        got = built_module(mk, built, parts(kata, built.recipe, probes))["outputs"]
        findings, matches = [], []
        for probe, output in zip(mk.probes, got):
            expected = cast(captured[probe.output_of or probe.reference][2])
            try:
                assert_close_where_defined(output, expected, defined, call="", what="output", tolerances=mk.tolerances)
                findings.append(tr("your {part} matches", part=probe.learner))
                matches.append(True)
            except AssertionError:
                findings.append(tr("your {part} differs", part=probe.learner))
                matches.append(False)
    except Exception:  # noqa: BLE001 - a hint only: the learner's parts may not be callable this way
        return []
    verdict = (
        tr("; the slip is in how they are put together (residuals, norms, their order, the feed-forward branch)")
        if all(matches)
        else ""
    )
    return [
        tr(
            "step by step, each part on PyTorch's own inputs to it: {findings}{verdict}",
            findings=tr("; ").join(findings),
            verdict=verdict,
        )
    ]


def check_on_device(mk: ModuleKata, kata, case, options: dict, device: str, make) -> None:
    """Results follow the inputs' device (masks made inside forward included): judged fully on
    a GPU; on "meta", which has shapes and devices but no values, only their kind (see
    checks.judge_on_device). make(gen, device) -> ({name: input tensor}, {keyword: value}).
    Everything is drawn from a fixed seed: a verdict on the stand-in must not depend on the seed."""

    def made_on(device: str):
        gen = torch.Generator().manual_seed(0)
        built = build(mk, gen, case, options, device=device)
        return (built, *make(gen, device))

    def expected(device: str) -> dict:
        built, inputs, kwargs = made_on(device)
        want, _ = mk.forward(built.reference, {k: t.detach().cpu().double() for k, t in inputs.items()}, kwargs)
        first = next(iter(inputs.values()))
        return {k: v.to(dtype=first.dtype, device=first.device) for k, v in want.items() if v is not None}

    def run_on(device: str, judge) -> None:
        built, inputs, kwargs = made_on(device)
        with diagnosing(mk.kata, replay(mk, built, inputs, kwargs), case):
            text, got, _ = run(mk, kata, built, inputs, kwargs)
            judge(text, got)

    def compare(got, want, *, call: str, what: str) -> None:
        assert_close(got, want, call=call, what=what, tolerance=mk.tolerances[want.dtype])

    judge_on_device(run_on, device, expected=expected, compare=compare)


def check_dropout_in_train_mode(mk: ModuleKata, kata, built: Built, inputs: dict) -> None:
    """Two calls in train() mode with dropout > 0 must differ."""
    built = built.mode(True)
    results = built_module(mk, built, forward_twice(kata, built.recipe, inputs))["results"]
    first, second = (mk.outputs(r, built.name, {})["output"] for r in results)
    assert_dropout_is_active(first, second, call=call_repr(built.name, *inputs.values()))


def check_gradients(mk: ModuleKata, kata, built: Built, inputs: dict, upstream, reference, **kwargs) -> None:
    """The gradients of every input through the learner's module against `reference(inputs)`
    ({name: expected gradient}, autograd through PyTorch's module in float64): autograd must
    see every step (no .detach(), .data or torch.no_grad() inside forward)."""
    text = call_repr(built.name, *inputs.values(), **kwargs) + ".backward"
    want = reference(inputs)

    def learner(implementation) -> dict:
        got = built_module(mk, built, gradients(implementation, built.recipe, inputs, kwargs, upstream, mk.output))
        if not got["requires_grad"]:
            raise AssertionError(
                tr("{call}: the output does not require grad; autograd lost track of the inputs", call=text)
            )
        for name in inputs:
            if got["grads"].get(name) is None:
                raise AssertionError(tr("{call}: no gradient reached `{name}`", call=text, name=name))
        return {f"the gradient of `{name}`": got["grads"][name] for name in inputs}

    with diagnosing(mk.kata, learner, built.case):
        got = learner(kata)
        for name, expected in want.items():
            what = f"the gradient of `{name}`"
            assert_close(got[what], expected, call=text, what=what)


def check_raises(mk: ModuleKata, kata, positional: dict, keywords: dict, *, expected: type, reason: str) -> None:
    """The learner's constructor raises `expected` for these arguments."""
    text = module_repr(mk.cls, **positional, **keywords)
    raises(mk.kata, kata, mk.cls, expected, tuple(positional.values()), keywords, reason=reason, text=text)


def check_heads_must_divide(mk: ModuleKata, kata, rng, width: str, heads: str, **extra) -> None:
    """The learner's constructor raises ValueError when `width` is not divisible by `heads`;
    `extra` keyword values may be functions of the width."""
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    keywords = {name: value(E) if callable(value) else value for name, value in extra.items()}
    check_raises(
        mk,
        kata,
        {width: E, heads: H},
        keywords,
        expected=ValueError,
        reason=f"{width} {E} cannot be split evenly into {H} heads",
    )


NON_DEFAULT_EPS = (1e-3, 4e-3, 1e-2)

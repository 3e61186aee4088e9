"""The shared path of the module katas (after PyTorch's ModuleInfo): the attention modules,
layers and blocks whose learner writes an nn.Module mirrored by one of PyTorch's.

A kata declares a ModuleKata: the class the learner writes, PyTorch's module it mirrors,
how parameters are named on each side, and how each side is called. One path then serves
every test: `build` makes PyTorch's module in float64 with EVERY parameter randomised
(LayerNorm weights and biases included, so swapped or reused norms show), rounds them to
the dtype under test and copies them by name into the learner's module; `check` calls
both and compares every output, never judging a row whose keys are all blocked.

The reference runs in float64, in train() mode with dropout 0 and autograd on, which keeps
it off PyTorch's fused inference fast path; its result is rounded to the dtype under test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from judge.language import tr
from judge.testing.checks import (
    Mismatch,
    assert_close,
    assert_raises_value_error,
    call_and_check_inputs,
    call_on_device,
    call_repr,
    check_tensor_kind,
    describe,
)
from judge.testing.diagnosis import diagnosing
from judge.testing.inputs import causal_blocked, randn
from judge.testing.spec import CaseTable, edge

# (rtol, atol) for a layer's result in the given dtype, compared with the float64 reference
# rounded to that dtype. A layer chains matmuls, a softmax and up to three LayerNorms, so
# these are wider than torch.testing's single-op defaults. float32, measured over 150 seeds
# x 7 cases (the edge cases included) on the solutions and every variant: encoder and
# decoder layers reach at most 0.14 of LAYER_TOLERANCES, the GPT-2 block 0.15 of
# MODULE_TOLERANCES (0.45 of the layers'; GELU and LayerNorms over 3 values are its worst).
# Half precision: measured on the random draws (the edge cases run in float64).
# The subtlest float32 mutant (tanh GELU) is off by >3e-4, and every slip is caught in
# float64, whose tolerance stays tight.
MODULE_TOLERANCES = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float32: {"rtol": 3e-5, "atol": 6e-5},
    torch.float16: {"rtol": 1.5e-2, "atol": 1.5e-2},
    torch.bfloat16: {"rtol": 1e-1, "atol": 1e-1},
}
LAYER_TOLERANCES = MODULE_TOLERANCES | {torch.float32: {"rtol": 1e-5, "atol": 2e-5}}

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
    edge("odd head size, more queries than keys", B=2, L=7, S=3, E=10, H=2, F=13),
    edge("head size 1", B=2, L=4, S=6, E=3, H=3, F=5),
    edge("one head", B=3, L=5, S=4, E=5, H=1, F=7),
    edge("one sequence, one position", B=1, L=1, S=1, E=6, H=2, F=9),
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


def load_parameters(
    module: nn.Module, expected: dict[str, torch.Tensor], *, what: str, asks: str, built: str | None = None
) -> nn.Module:
    """Copy `expected` (name -> tensor) into the learner's module, by name.

    Fails with a message naming the first missing submodule or parameter, a parameter of
    the wrong shape, or a parameter the reference has no counterpart for. `what` names the
    class (e.g. "MultiHeadAttention"), `asks` lists the submodules the kata asks for, `built`
    says how the module was built (e.g. "MultiHeadAttention(embed_dim=6, num_heads=2, bias=False)").
    """
    built = built or what
    have = dict(module.named_parameters())
    for name, tensor in expected.items():
        if name in have:
            continue
        *path, leaf = name.split(".")
        owner, walked = module, []
        for part in path:
            child = getattr(owner, part, None) if isinstance(owner, nn.Module) else None
            if not isinstance(child, nn.Module):
                where = ".".join([what] + walked)
                raise AssertionError(f"{where} has no submodule `{part}`; the kata asks for {asks}")
            owner, walked = child, walked + [part]
        raise AssertionError(
            f"{'.'.join([built, *path])} has no parameter `{leaf}` (expected one of shape {list(tensor.shape)})"
            + ("; with bias=True every Linear and LayerNorm has a bias" if leaf == "bias" else "")
        )
    for name, p in have.items():
        if name not in expected:
            raise AssertionError(
                f"{built} has a parameter `{name}` of shape {list(p.shape)} that PyTorch's module has no "
                f"counterpart for; the kata asks for {asks}"
                + (" (with bias=False: no bias in any Linear or LayerNorm)" if name.endswith("bias") else "")
            )
        if p.shape != expected[name].shape:
            raise AssertionError(
                f"{built}.{name} has shape {list(p.shape)}, expected {list(expected[name].shape)} "
                "(nn.Linear(in, out) keeps its weight as [out, in])"
            )
    with torch.no_grad():
        for name, p in have.items():
            p.copy_(expected[name].to(p.dtype))
    return module


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
        keep = defined.to(expected.device)
        keep = keep[:, None, :, None] if what == "weights" else keep[:, :, None]
        zero = torch.zeros((), dtype=expected.dtype, device=expected.device)

        def project(value):
            return torch.where(keep, value, zero)

        actual, expected = project(actual), project(expected)
    nan = torch.isnan(actual.detach().cpu()) & ~torch.isnan(expected.cpu())
    if nan.any():
        where = tuple(int(i) for i in nan.nonzero()[0])
        raise Mismatch(
            f"{call} returned {what} with NaN at index {where} ({int(nan.sum())} of {nan.numel()} elements) "
            f"where PyTorch gives {expected[where].item():.6g}. {nan_hint}",
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
            f"two calls of {call} in train() mode returned the same output; with dropout > 0 training "
            "should zero random activations, so two calls differ (use nn.Dropout or F.dropout with "
            "training=self.training)"
        )


def module_repr(name: str, **kwargs) -> str:
    """How the module was built, e.g. `TransformerEncoderLayer(d_model=12, nhead=3, norm_first=True)`."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


# --------------------------------------------------------------------------- one path for every module kata


@dataclass(frozen=True)
class Probe:
    """One part of a layer, checked on its own when the layer's output is wrong: the learner's
    submodule `learner` is called (by `call(submodule, args, kwargs)`) with the very inputs
    PyTorch's `reference` submodule received in the reference's forward, and its result is
    compared with what PyTorch's `output_of` submodule (by default the same) returned."""

    learner: str
    reference: str
    call: Callable
    output_of: str | None = None


def attention_probe(name: str) -> Probe:
    """The learner's attention submodule `name`, called as the stubs declare it (query, key,
    value, attn_mask, key_padding_mask), on the inputs and the explicit masks PyTorch's got."""
    return Probe(
        name, name, lambda attention, args, kw: attention(*args[:3], kw.get("attn_mask"), kw.get("key_padding_mask"))
    )


@dataclass(frozen=True)
class ModuleKata:
    """How a module kata mirrors its PyTorch module.

    kata: its name. cls: the class the learner writes. asks: its submodules, for messages.
    inputs: forward's tensor arguments in order. reference(case, options): PyTorch's module
    in float64. parameters(reference): its parameters under the kata's names.
    arguments(case, options): the learner's constructor call, ({name: positional value},
    {keyword: value}). forward(reference, inputs, kwargs): PyTorch's result, ({what: expected
    or None}, defined [B, L]). outputs(result, call, kwargs): the learner's result as {what:
    tensor}, after checking its form. shapes(case, inputs, kwargs): {what: shape} of the
    results (for the "meta" device, which has no values). tolerances: per dtype. probes: the
    parts of a layer to run alone when its output is wrong. nan_hint: why a NaN appears, in
    the terms of the kata's mask polarity."""

    kata: str
    cls: str
    asks: str
    inputs: tuple[str, ...]
    reference: Callable
    parameters: Callable
    arguments: Callable
    forward: Callable
    outputs: Callable = lambda result, call, kwargs: {"output": result}
    shapes: Callable = lambda case, inputs, kwargs: {"output": next(iter(inputs.values())).shape}
    tolerances: Mapping = field(default_factory=lambda: MODULE_TOLERANCES)
    probes: tuple[Probe, ...] = ()
    nan_hint: str = NN_NAN_HINT


@dataclass
class Built:
    """The learner's module (eval() mode unless asked, parameters copied, on the device), the
    float64 reference, how the module was built (for messages), its case, and `remake`:
    the same construction, weights and mode with another implementation (a known slip's,
    for the diagnosis)."""

    module: nn.Module
    reference: nn.Module
    name: str
    case: dict
    remake: Callable[[object], nn.Module]


def build(
    mk: ModuleKata, kata, gen, case, options: dict, dtype=torch.float32, device="cpu", *, train: bool = False
) -> Built:
    reference = randomise_(mk.reference(case, options), gen, dtype)
    positional, keywords = mk.arguments(case, options)
    name = module_repr(mk.cls, **positional, **keywords)
    if not train:
        name += ".eval()" if keywords.get("dropout") else ""

    def make(implementation, mode: bool = train) -> nn.Module:
        module = getattr(implementation, mk.cls)(*positional.values(), **keywords).to(dtype)
        load_parameters(module, mk.parameters(reference), what=mk.cls, asks=mk.asks, built=name)
        return module.to(device).train(mode)

    with diagnosing(mk.kata, lambda implementation: {"module": make(implementation)}, dict(case)):
        module = make(kata)
    built = Built(module, reference, name, dict(case), lambda implementation: None)
    built.remake = lambda implementation: make(implementation, built.module.training)
    return built


def _copies(tensors: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}


def _run(mk: ModuleKata, module: nn.Module, text: str, inputs: dict, kwargs: dict) -> dict:
    watched = inputs | {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    result = call_and_check_inputs(lambda: module(*inputs.values(), **kwargs), text, **watched)
    return mk.outputs(result, text, kwargs)


def _replay(mk: ModuleKata, built: Built, text: str, inputs: dict, kwargs: dict):
    """The same call, with another implementation's module (same weights, same mode), on copies
    of the inputs taken now (before the learner's call can change them) and with the random
    state of now (so dropout draws the same masks)."""
    inputs, kwargs, state = _copies(inputs), _copies(kwargs), torch.get_rng_state()

    def replay(implementation) -> dict:
        module = built.remake(implementation)
        torch.set_rng_state(state)
        return _run(mk, module, text, _copies(inputs), _copies(kwargs))

    return replay


def call(mk: ModuleKata, built: Built, inputs: dict, **kwargs) -> tuple[str, dict]:
    """(how the call looked, the learner's outputs), after checking no input was changed in place."""
    text = call_repr(built.name, *inputs.values(), **kwargs)
    replay = _replay(mk, built, text, inputs, kwargs)
    with diagnosing(mk.kata, replay, built.case):
        return text, _run(mk, built.module, text, inputs, kwargs)


def check(mk: ModuleKata, built: Built, inputs: dict, **kwargs) -> None:
    """The learner's outputs against PyTorch's, on the rows where they are defined."""
    want, defined = mk.forward(built.reference, {k: t.detach().cpu().double() for k, t in inputs.items()}, kwargs)
    replay = _replay(mk, built, call_repr(built.name, *inputs.values(), **kwargs), inputs, kwargs)
    text, got = call(mk, built, inputs, **kwargs)
    first = next(iter(inputs.values()))
    try:
        with diagnosing(mk.kata, replay, built.case):
            for what, expected in want.items():
                if expected is None:
                    if got.get(what) is not None:
                        raise AssertionError(f"{text} returned {what} {describe(got[what])}; expected None")
                    continue
                expected = expected.to(dtype=first.dtype, device=first.device)
                assert_close_where_defined(
                    got[what], expected, defined, call=text, what=what, tolerances=mk.tolerances, nan_hint=mk.nan_hint
                )
    except Mismatch as error:
        if mk.probes and not error.kind_only and hasattr(error, "kata_diagnosis"):
            error.kata_diagnosis = [*error.kata_diagnosis, *_step_by_step(mk, built, inputs, kwargs, defined)]
        raise


def _step_by_step(mk: ModuleKata, built: Built, inputs: dict, kwargs: dict, defined) -> list[str]:
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
        findings, matches = [], []
        for probe in mk.probes:
            args, kw, _ = captured[probe.reference]
            expected = captured[probe.output_of or probe.reference][2]

            def cast(value):
                if not isinstance(value, torch.Tensor):
                    return value
                value = value.detach().to(first.device)
                return value.to(first.dtype) if value.is_floating_point() else value

            with torch.no_grad():
                got = probe.call(
                    built.module.get_submodule(probe.learner),
                    [cast(a) for a in args],
                    {k: cast(v) for k, v in kw.items()},
                )
            try:
                assert_close_where_defined(
                    got, cast(expected), defined, call="", what="output", tolerances=mk.tolerances
                )
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


def check_on_device(mk: ModuleKata, built: Built, case, inputs: dict, device: str, **kwargs) -> None:
    """Results follow the inputs' device (masks made inside forward included): judged fully on
    a GPU; on "meta", which has shapes and devices but no values, only their kind."""
    if device != "meta":
        check(mk, built, inputs, **kwargs)
        return
    text, got = call_on_device(lambda: call(mk, built, inputs, **kwargs), device)
    for what, shape in mk.shapes(case, inputs, kwargs).items():
        check_tensor_kind(got[what], torch.empty(shape, device="meta"), call=text, what=what)


def check_dropout_in_train_mode(mk: ModuleKata, built: Built, inputs: dict, seed: int) -> None:
    """Two calls in train() mode with dropout > 0 must differ."""
    built.module.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first = mk.outputs(built.module(*inputs.values()), built.name, {})["output"]
        second = mk.outputs(built.module(*inputs.values()), built.name, {})["output"]
    assert_dropout_is_active(
        first, second, call=call_repr(built.name.removesuffix(".eval()") + ".train()", *inputs.values())
    )


def check_heads_must_divide(mk: ModuleKata, kata, rng, width: str, heads: str, **extra) -> None:
    """The learner's constructor raises ValueError when `width` is not divisible by `heads`;
    `extra` keyword values may be functions of the width."""
    H = rng.randint(2, 6)
    E = H * rng.randint(2, 6) + rng.randint(1, H - 1)
    keywords = {name: value(E) if callable(value) else value for name, value in extra.items()}
    assert_raises_value_error(
        lambda: getattr(kata, mk.cls)(E, H, **keywords),
        call=module_repr(mk.cls, **{width: E, heads: H}, **keywords),
        reason=f"{width} {E} cannot be split evenly into {H} heads",
    )


NON_DEFAULT_EPS = (1e-3, 4e-3, 1e-2)


def layer_options(rng, case, *, defaults: bool = False, dropout: float = 0.0, **chosen) -> dict:
    """The options of a kata mirroring nn.TransformerEncoderLayer or DecoderLayer. Unless
    `defaults`: dim_feedforward, layer_norm_eps (never PyTorch's default) and dropout are
    always passed, and norm_first, activation and bias are `chosen` or drawn at random.
    With `defaults` none is passed: the kata's own defaults must be PyTorch's."""
    if defaults:
        return {}
    options = {
        "dim_feedforward": case["F"],
        "dropout": dropout,
        "activation": chosen.get("activation", rng.choice(["relu", "gelu"])),
        "layer_norm_eps": rng.choice(NON_DEFAULT_EPS),
        "norm_first": chosen.get("norm_first", rng.random() < 0.5),
    }
    if not chosen.get("bias", rng.random() < 0.7):
        options["bias"] = False
    return options

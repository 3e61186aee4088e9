"""The shared path of the module katas: multi_head_attention, causal_lm_block, encoder_layer,
decoder_layer.

The oracle is a PyTorch module (nn.MultiheadAttention, nn.TransformerEncoderLayer,
nn.TransformerDecoderLayer) built in float64 with EVERY parameter randomised (LayerNorm
weights and biases included, so swapped or reused norms show), rounded to the dtype under
test, and copied by name into the learner's module. The reference runs in float64, in
train() mode with dropout 0 and autograd on, which keeps it off PyTorch's fused inference
fast path; its result is rounded to the dtype under test. Rows whose every key is blocked
are undefined (NaN in PyTorch) and are never judged. Delegating attention to PyTorch is
refused by judge.forbidden (each spec sets forbidden=ATTENTION).
"""

import torch
from torch import nn

from judge.testing.checks import assert_close, check_tensor_kind
from judge.testing.inputs import causal_blocked, randn

# (rtol, atol) for a module's result in the given dtype, compared with the float64 reference
# rounded to that dtype. A layer chains matmuls, softmax and up to three LayerNorms, so these
# are wider than torch.testing's single-op defaults. Measured over hundreds of seeds, the
# solutions and the variants stay under half of them (float32's worst: a d_model 3 post-norm
# decoder layer, LayerNorms over 3 values); the subtlest mutant (tanh GELU) is off by >3e-4
# in float32, and every slip is caught in float64, whose tolerance stays tight.
MODULE_TOLERANCES = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
    torch.float32: {"rtol": 3e-5, "atol": 6e-5},
    torch.float16: {"rtol": 1.5e-2, "atol": 1.5e-2},
    torch.bfloat16: {"rtol": 1e-1, "atol": 1e-1},
}

# --------------------------------------------------------------------------- hidden sizes


def hidden_sizes(rng, count: int = 3) -> list[dict]:
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
    Linear weights N(0, 1/fan_in), LayerNorm weights 1 + N(0, 0.4^2), biases N(0, 0.4^2).
    Activations stay O(1) and the attention weights spread out instead of saturating."""
    for sub in module.modules():
        for name, p in sub.named_parameters(recurse=False):
            if p.dim() == 2:
                value = randn(gen, *p.shape, dtype=torch.float64, std=p.shape[1] ** -0.5)
            elif isinstance(sub, nn.LayerNorm) and name == "weight":
                value = 1 + randn(gen, *p.shape, dtype=torch.float64, std=0.4)
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
            f"{built}.{'.'.join(path)} has no parameter `{leaf}` (expected one of shape {list(tensor.shape)})"
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


def assert_close_where_defined(actual, expected: torch.Tensor, defined, *, call: str, what: str) -> None:
    """assert_close with MODULE_TOLERANCES, skipping undefined rows.

    `defined` is [B, L]; `expected` is [B, L, ...] or [B, H, L, S] ("weights")."""
    check_tensor_kind(actual, expected, call=call, what=what)
    tolerance = MODULE_TOLERANCES[expected.dtype]
    if defined is not None and not bool(defined.all()):
        keep = defined.to(expected.device)
        keep = keep[:, None, :, None] if what == "weights" else keep[:, :, None]
        zero = torch.zeros((), dtype=expected.dtype, device=expected.device)
        actual, expected = torch.where(keep, actual, zero), torch.where(keep, expected, zero)
    nan = torch.isnan(actual.detach().cpu()) & ~torch.isnan(expected.cpu())
    if nan.any():
        where = tuple(int(i) for i in nan.nonzero()[0])
        raise AssertionError(
            f"{call} returned {what} with NaN at index {where} ({int(nan.sum())} of {nan.numel()} elements) "
            f"where PyTorch gives {expected[where].item():.6g}. NaN usually comes from a softmax over a row of "
            "-inf, a query whose every key was blocked: here a boolean mask is True where attention is BLOCKED "
            "(the opposite of F.scaled_dot_product_attention), and key_padding_mask [B, S] blocks keys, not queries"
        )
    assert_close(actual, expected, call=call, what=what, tolerance=tolerance)


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

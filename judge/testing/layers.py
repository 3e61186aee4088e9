"""A Transformer layer kata's tests, the parts every layer kata runs alike (encoder_layer,
decoder_layer, causal_lm_block): its recipe, its inputs, and the checks that differ from
one layer to the next only in the masks they pass.

A test module declares its `Layer` (its ModuleKata, its tensor inputs, its options) and
each test states what it passes: `masks(gen, case, dtype, device) -> [keyword arguments]`,
one call judged per entry. So a test reads as what it judges:

    @core
    @dtypes(*FULL)
    def test_src_key_padding_mask_true_ignores_that_key(kata, rng, gen, dtype, device):
        ENCODER.judge(kata, rng, gen, dtype, device, masks=padded)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from judge.testing import modules
from judge.testing.inputs import as_float_mask, randn
from judge.testing.modules import CASES, NON_DEFAULT_EPS, Built, ModuleKata

FULL = [torch.float32, torch.float64]
HALF = [torch.float16, torch.bfloat16]
LAYOUTS = pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
ACTIVATIONS = pytest.mark.parametrize("activation", ["relu", "gelu"])
DROPOUT = "dropout: ... in train() mode only; eval() disables it."
HALF_PRECISION = "float16 and bfloat16 work: a blocked score is -inf, not -1e9 (out of float16's range)."
PYTORCH_DEFAULTS = (
    'the defaults are PyTorch\'s: dim_feedforward=2048, dropout=0.1, activation="relu", '
    "layer_norm_eps=1e-5, norm_first=False."
)

Masks = Callable[..., list[dict]]  # (gen, case, dtype, device) -> the keyword arguments of each call


def no_masks(gen, case, dtype, device) -> list[dict]:
    return [{}]


def pytorch_layer(cls: type) -> Callable:
    """The float64 reference of a kata mirroring nn.TransformerEncoderLayer or DecoderLayer
    (`cls`), built from the options the learner's layer gets, without dropout."""

    def reference(case, options):
        settings = {k: v for k, v in options.items() if k != "dropout"}
        return cls(case["E"], case["H"], **settings, dropout=0.0, batch_first=True, dtype=torch.float64)

    return reference


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


def floats(gen, masks: dict, dtype) -> dict:
    """The same masks as float ones (0 where allowed, -inf or a large negative where blocked)."""
    return {name: as_float_mask(gen, mask, dtype) for name, mask in masks.items()}


@dataclass(frozen=True)
class Layer:
    """A layer kata's tests. mk: its ModuleKata. tensors: forward's tensor inputs, a function
    (gen, case, dtype, device) -> {name: tensor}. options: its constructor's options, a function
    (rng, case, *, defaults, dropout, **chosen) -> {keyword: value}. defaults_in_train: built
    with its defaults, the layer stays in train() mode (its default dropout is 0)."""

    mk: ModuleKata
    tensors: Callable
    options: Callable = layer_options
    defaults_in_train: bool = False

    def build(
        self, gen, rng, case, dtype=torch.float32, device="cpu", *, defaults=False, dropout=0.0, **chosen
    ) -> Built:
        """The recipe of the learner's layer (eval() mode unless defaults_in_train) and the float64 reference."""
        options = self.options(rng, case, defaults=defaults, dropout=dropout, **chosen)
        train = defaults and self.defaults_in_train
        built = modules.build(self.mk, gen, case, options, dtype, device, train=train)
        built.name += ".eval()" if defaults and not train else ""
        return built

    def inputs(self, gen, case, dtype=torch.float32, device="cpu") -> dict:
        return self.tensors(gen, case, dtype, device)

    def check(self, kata, built: Built, tensors: dict, **kwargs) -> None:
        modules.check(self.mk, kata, built, tensors, **kwargs)

    def judge(self, kata, rng, gen, dtype, device="cpu", *, masks: Masks = no_masks, draws=None, **chosen) -> None:
        """Each case (in float64 the edge cases too; `draws` random ones only, if given): a layer
        built with `chosen`, its inputs, and one call checked per keyword set of `masks`."""
        cases = CASES.random(rng, draws) if draws else CASES.cases(rng, edges=dtype == torch.float64)
        for case in cases:
            with case.judged():
                built = self.build(gen, rng, case, dtype, device, **chosen)
                tensors = self.inputs(gen, case, dtype, device)
                for kwargs in masks(gen, case, dtype, device):
                    self.check(kata, built, tensors, **kwargs)

    # ------------------------------------------------------------------ the shared tests

    def has_its_submodules(self, kata, rng, gen) -> None:
        """Every parameter by name, with biases exactly when bias=True."""
        case = CASES.random(rng)[1]
        for bias in (True, False):
            self.check(kata, self.build(gen, rng, case, bias=bias), self.inputs(gen, case))

    def writes_its_own_attention(self, kata, rng, gen, masks: Masks, layouts=(None,)) -> None:
        """Every path of forward runs, in eval() and train() mode, with and without `masks`:
        the spec's forbidden rules refuse PyTorch's attention while the kata runs."""
        case = CASES.random(rng)[1]
        tensors = self.inputs(gen, case)
        (kwargs,) = masks(gen, case, torch.float32, "cpu")
        for norm_first in layouts:
            chosen = {} if norm_first is None else {"norm_first": norm_first}
            built = self.build(gen, rng, case, dropout=0.1, **chosen)
            for train in (False, True):
                modules.call(self.mk, kata, built.mode(train), tensors)
                modules.call(self.mk, kata, built.mode(train), tensors, **kwargs)

    def keeps_its_defaults(self, kata, rng, gen, draws: int = 1) -> None:
        for case in CASES.random(rng, draws):
            with case.judged():
                self.check(kata, self.build(gen, rng, case, defaults=True), self.inputs(gen, case))

    def works_in_half_precision(self, kata, rng, gen, dtype, masks: Masks) -> None:
        self.judge(kata, rng, gen, dtype, masks=masks, draws=2)

    def computes_float64_in_float64(self, kata, rng, gen, masks: Masks) -> None:
        for case in CASES.cases(rng, 2):
            with case.judged():
                built = self.build(gen, rng, case, torch.float64)
                tensors = self.inputs(gen, case, torch.float64)
                for kwargs in masks(gen, case, torch.float64, "cpu"):
                    self.check(kata, built, tensors, float64_throughout=True, **kwargs)

    def eval_disables_dropout(self, kata, rng, gen, masks: Masks = no_masks) -> None:
        self.judge(kata, rng, gen, torch.float32, masks=masks, draws=2, dropout=0.5)

    def train_applies_dropout(self, kata, rng, gen) -> None:
        case = CASES.random(rng)[1]
        built = self.build(gen, rng, case, dropout=0.5)
        modules.check_dropout_in_train_mode(self.mk, kata, built, self.inputs(gen, case))

    def follows_the_device(self, kata, other_device, masks: Masks, options: dict) -> None:
        """Results follow the inputs' device, masks made inside forward included (see
        modules.check_on_device); on a fixed case, so a verdict on the meta stand-in does not
        depend on the seed."""
        case = CASES.edges[0]

        def make(gen, device):
            (kwargs,) = masks(gen, case, torch.float32, device)
            return self.inputs(gen, case, device=device), kwargs

        modules.check_on_device(
            self.mk, kata, case, {name: case[key] for name, key in options.items()}, other_device, make
        )

    def leaves_its_inputs_alone(self, kata, rng, gen, masks: dict, causal: dict, layouts=(None,)) -> None:
        """The tensors and boolean `masks` (drawn for a random case: (gen, case) -> {name: mask}),
        in each layout; then the masks as float ones with `causal` on."""
        case = CASES.random(rng)[1]
        tensors = self.inputs(gen, case)
        boolean = masks(gen, case)
        for norm_first in layouts:
            chosen = {} if norm_first is None else {"norm_first": norm_first}
            built = self.build(gen, rng, case, **chosen)
            modules.assert_inputs_left_alone(self.mk, kata, built, tensors, **boolean)
        modules.assert_inputs_left_alone(self.mk, kata, built, tensors, **causal, **floats(gen, boolean, torch.float32))


def tensor(gen, case, size: str, dtype, device) -> torch.Tensor:
    """A random [B, case[size], E] input."""
    return randn(gen, case["B"], case[size], case["E"], dtype=dtype, device=device)

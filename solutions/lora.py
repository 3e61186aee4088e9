"""Kata【LoRA：在冻结的 nn.Linear 旁加一个可训练的低秩更新（合并与撤销合并）】: LoRA, a trainable low-rank update beside a frozen nn.Linear (Hu et al., 2021)."""

import math

import torch
from torch import Tensor, nn


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update:
    base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling.

    Sizes: in_features and out_features are base's (base.weight is [out_features,
    in_features]); r is the rank of the update.

    __init__(base, r, alpha=None, dropout=0.0)
        - raise ValueError when r < 1.
        - base: an nn.Linear, with or without a bias. Keep it as self.base: the very module
          passed in, not a copy (merge() changes base.weight in place).
        - freeze base: base.weight and base.bias (when it has one) get requires_grad=False.
          The only parameters that require grad are lora_A and lora_B.
        - lora_A: an nn.Parameter [r, in_features], initialised like nn.Linear's weight:
          nn.init.kaiming_uniform_(lora_A, a=math.sqrt(5)), which is uniform in
          [-1/sqrt(in_features), 1/sqrt(in_features)].
        - lora_B: an nn.Parameter [out_features, r] of zeros, so that at initialisation
          the output is exactly base(x).
        - lora_A and lora_B have base.weight's dtype and device (float64, float16, CUDA...).
        - self.scaling = alpha / r, a Python float; alpha=None means alpha = r (scaling 1.0).
        - dropout: the probability of zeroing an element of x on the LoRA branch only, in
          train() mode only (nn.Dropout(dropout), or F.dropout(..., training=self.training));
          base(x) always sees x as it is, and eval() turns the dropout off.
        - the grader overwrites lora_A and lora_B with values of its own (as training would)
          and keeps them under these names.

    forward(x [..., in_features]) -> [..., out_features]
        - base(x) + (dropout(x) @ lora_A.T @ lora_B.T) * scaling
        - any leading dimensions, none included ([in_features] alone works).
        - the output has x's dtype and device; x is not modified. Gradients reach lora_A,
          lora_B and x (through both paths), never base's parameters.
        - once merged (below), forward is base(x) alone: the update is inside base.weight.

    merge()
        - adds scaling * lora_B @ lora_A into base.weight, in place and WITHOUT recording a
          graph (under torch.no_grad()): base.weight stays a leaf with requires_grad=False.
        - from then on forward returns base(x) alone (the same result, one matmul).
        - merging a merged module again does nothing.

    unmerge()
        - subtracts scaling * lora_B @ lora_A from base.weight again (also without a
          graph): base.weight is back to what it was, up to rounding, and forward adds the
          low-rank branch again.
        - unmerging a module that is not merged does nothing.

    Conventions (judged apart from the math, as production code would need them):
        - raise ValueError when r < 1.
        - lora_A and lora_B have base.weight's dtype and device; the output has x's dtype and device.
        - x is never changed in place.
        - float16 and bfloat16 work.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - dropout: in train() mode only, on the low-rank branch's input only; base(x) always sees x
          as it is, and eval() turns the dropout off.
        - self.base is the very nn.Linear passed in, not a copy (merge() changes its weight in place).
        - self.scaling = alpha / r, a Python float; alpha=None means alpha = r (scaling 1.0).
        - merge() and unmerge() record no graph: base.weight stays a leaf with requires_grad=False.
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float | None = None, dropout: float = 0.0):
        super().__init__()
        ### BEGIN SOLUTION
        # TODO: raise ValueError when r < 1.
        if r < 1:
            raise ValueError(f"the rank r must be at least 1, got {r}")
        # TODO: keep base itself (not a copy) and freeze its weight and bias.
        self.base = base
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        # TODO: scaling = alpha / r as a Python float (alpha None means r).
        self.r = r
        self.scaling = float(r if alpha is None else alpha) / r
        # TODO: lora_A [r, in] Kaiming-uniform (a = sqrt(5)), lora_B [out, r] zeros, both
        # TODO: with base.weight's dtype and device.
        out_features, in_features = base.weight.shape
        like = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty(r, in_features, **like))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r, **like))
        # TODO: dropout on the LoRA branch's input, active in train() only.
        self.dropout = nn.Dropout(dropout)
        self.merged = False
        ### END SOLUTION

    def forward(self, x: Tensor) -> Tensor:
        ### BEGIN SOLUTION
        # TODO: the frozen base sees x as it is.
        out = self.base(x)  # (..., out_features)
        # TODO: once merged, the update is already inside base.weight.
        if self.merged:
            return out
        # TODO: add the low-rank branch: dropout(x), down to r with lora_A, up with lora_B, scaled.
        update = self.dropout(x) @ self.lora_A.T @ self.lora_B.T  # (..., r) then (..., out_features)
        return out + update * self.scaling
        ### END SOLUTION

    def merge(self) -> None:
        ### BEGIN SOLUTION
        # TODO: a no-op when already merged.
        if self.merged:
            return
        # TODO: base.weight += scaling * lora_B @ lora_A, recording no graph.
        with torch.no_grad():
            self.base.weight += self.scaling * (self.lora_B @ self.lora_A)  # (out_features, in_features)
        self.merged = True
        ### END SOLUTION

    def unmerge(self) -> None:
        ### BEGIN SOLUTION
        # TODO: a no-op unless merged.
        if not self.merged:
            return
        # TODO: base.weight -= scaling * lora_B @ lora_A, recording no graph.
        with torch.no_grad():
            self.base.weight -= self.scaling * (self.lora_B @ self.lora_A)  # (out_features, in_features)
        self.merged = False
        ### END SOLUTION

"""Kata【手写注意力反向传播（不用 autograd）】: the backward pass of scaled dot-product attention, by hand (no autograd)."""

import math

import torch
from torch import Tensor


def attention_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    grad_output: Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Return (grad_query, grad_key, grad_value) of attention, derived and written by hand.

    The forward pass being differentiated, for each leading batch/head index:
        scores  = query @ key^T * scale      [L, S]   (-inf where blocked by is_causal)
        weights = softmax(scores, over keys) [L, S]
        output  = weights @ value            [L, Ev]
    grad_output is dLoss/d(output); return dLoss/d(query), dLoss/d(key), dLoss/d(value).

    Shapes (any number of leading batch/head dimensions "...", none included; L != S allowed):
        query [..., L, E], key [..., S, E], value [..., S, Ev], grad_output [..., L, Ev]
        grad_query [..., L, E], grad_key [..., S, E], grad_value [..., S, Ev]
    Results have the dtype of the inputs (float32 and float64 are tested).

    Same conventions as F.scaled_dot_product_attention (no mask tensor, no dropout):
        - scale defaults to 1 / sqrt(E).
        - is_causal=True lets query i attend to keys 0..i only, top-left aligned, also
          when L != S (query 0 always sees key 0, so no row is fully blocked).

    Rules: recompute what the forward pass would have saved (the weights); do not use
    autograd in any form (torch.autograd.grad, .backward(), torch.func, forward-mode AD):
    the tests look for it.

    Conventions (judged apart from the math, as production code would need them):
        - results follow the inputs' device (a causal mask made inside too).
        - the inputs are never changed in place.
        - it works under torch.no_grad(), on inputs that do not require grad (the
          gradients come from your own formulas).
        - float64 inputs are computed in float64 throughout (no step in float32).

    What to derive, one step at a time (each step is a line or two of tensor code):
        1. grad_value: output is linear in value; value row s reaches output row l
           with the factor weights[l, s]. Sum that over the queries.
        2. grad_weights: output is linear in the weights too, with value as the factor.
        3. The softmax backward, grad_scores: write the Jacobian d weights[l, i] /
           d scores[l, j] of one row (two cases: i == j and i != j) and apply it to that
           row of grad_weights without building an [S, S] matrix per row. Its diagonal
           part alone is not the answer: every score moves every weight of its row.
        4. grad_query and grad_key: scores is a matrix product of query and key^T,
           times scale. Chain rule through a matmul; mind which side is transposed,
           and where the scale goes.
        Blocked (causal) positions have weight 0: check what your formulas give there.

    Example:
        >>> q = k = torch.eye(2); v = torch.tensor([[1.0], [3.0]]); d_out = torch.ones(2, 1)
        >>> grad_q, grad_k, grad_v = attention_backward(q, k, v, d_out)
        >>> grad_q
        tensor([[-0.3128,  0.3128],
                [-0.3128,  0.3128]])
        >>> grad_v
        tensor([[1.],
                [1.]])
    """
    ### BEGIN SOLUTION
    # TODO: recompute the forward: scaled scores, the causal mask, the weights.
    L, S = query.size(-2), key.size(-2)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    scores = query @ key.transpose(-2, -1) * scale  # (..., L, S)
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., L, S)
    # TODO: grad_value, then grad_weights.
    grad_value = weights.transpose(-2, -1) @ grad_output  # (..., S, Ev)
    grad_weights = grad_output @ value.transpose(-2, -1)  # (..., L, S)
    # TODO: the softmax backward: grad_scores from grad_weights and weights.
    correction = (grad_weights * weights).sum(dim=-1, keepdim=True)  # (..., L, 1)
    grad_scores = weights * (grad_weights - correction)  # (..., L, S)
    # TODO: grad_query and grad_key, through the matmul and the scale.
    grad_query = grad_scores @ key * scale  # (..., L, E)
    grad_key = grad_scores.transpose(-2, -1) @ query * scale  # (..., S, E)
    return grad_query, grad_key, grad_value
    ### END SOLUTION

"""Kata【用 `torch.autograd.Function` 实现注意力（手写 backward，gradcheck）】: attention as a torch.autograd.Function, with a hand-written backward."""

import math

import torch


class AttentionFunction(torch.autograd.Function):
    """output = softmax(query @ key^T * scale + causal mask) @ value, with its own backward.

    Call it as `AttentionFunction.apply(query, key, value, is_causal, scale)` (positional
    arguments: Function.apply takes no keywords). Autograd then calls your backward, so
    `output.backward(...)`, `torch.autograd.grad` and `torch.autograd.gradcheck` work
    through it. The grader calls forward and backward itself, as autograd's engine does,
    with a ctx that offers what autograd's offers (save_for_backward and saved_tensors,
    needs_input_grad, mark_non_differentiable, set_materialize_grads, plain attributes):
    autograd itself is not available while your code runs.

    Shapes (any number of leading batch/head dimensions "...", none included; L != S allowed):
        query [..., L, E], key [..., S, E], value [..., S, Ev] -> output [..., L, Ev]
    Same conventions as F.scaled_dot_product_attention (no mask tensor, no dropout):
    scale=None means 1 / sqrt(E); is_causal=True lets query i attend to keys 0..i only,
    top-left aligned, also when L != S.

    Rules:
        - forward keeps what backward needs on ctx (tensors: see the conventions below;
          non-tensors such as the scale as plain ctx attributes). Saving the weights trades
          memory for time; saving only the inputs and recomputing the weights in backward
          (as FlashAttention does) is fine too.
        - backward derives the gradients itself: no autograd inside (no torch.autograd.grad,
          .backward(), torch.func, no graph recorded in forward to replay later).
        - backward returns one gradient per input of forward: None for is_causal and scale.
    The derivation is the one of the attention_backward kata: grad_value, grad_weights,
    the softmax backward, then grad_query and grad_key with the scale.
    Results have the dtype of the inputs (float32 and float64 are tested).

    Conventions (judged apart from the math, as production code would need them):
        - forward keeps the tensors backward needs with ctx.save_for_backward (never as
          ctx attributes): autograd then checks them for in-place changes and frees them
          with the graph.
        - results follow the inputs' device (a causal mask made inside too).
        - the inputs and grad_output are never changed in place.
        - float64 inputs are computed in float64 throughout (no step in float32).

    Example:
        >>> q = k = torch.eye(2, requires_grad=True); v = torch.tensor([[1.0], [3.0]])
        >>> out = AttentionFunction.apply(q, k, v, True, None)
        >>> out
        tensor([[1.0000],
                [2.3395]], grad_fn=<AttentionFunctionBackward>)
    """

    @staticmethod
    def forward(ctx, query, key, value, is_causal=False, scale=None):
        ### BEGIN SOLUTION
        # TODO: the scaled scores, the causal mask, the weights and the output.
        L, S = query.size(-2), key.size(-2)
        if scale is None:
            scale = 1.0 / math.sqrt(query.size(-1))
        scores = query @ key.transpose(-2, -1) * scale  # (..., L, S)
        if is_causal:
            allowed = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (..., L, S)
        # TODO: save what backward needs: tensors with ctx.save_for_backward, the rest on ctx.
        ctx.save_for_backward(query, key, value, weights)
        ctx.scale = scale
        return weights @ value  # (..., L, Ev)
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_output):
        ### BEGIN SOLUTION
        # TODO: get back what forward saved.
        query, key, value, weights = ctx.saved_tensors
        scale = ctx.scale
        # TODO: grad_value, grad_weights, the softmax backward, grad_query and grad_key.
        grad_value = weights.transpose(-2, -1) @ grad_output  # (..., S, Ev)
        grad_weights = grad_output @ value.transpose(-2, -1)  # (..., L, S)
        correction = (grad_weights * weights).sum(dim=-1, keepdim=True)  # (..., L, 1)
        grad_scores = weights * (grad_weights - correction)  # (..., L, S)
        grad_query = grad_scores @ key * scale  # (..., L, E)
        grad_key = grad_scores.transpose(-2, -1) @ query * scale  # (..., S, E)
        # TODO: one gradient per forward input: None for is_causal and scale.
        return grad_query, grad_key, grad_value, None, None
        ### END SOLUTION

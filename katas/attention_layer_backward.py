"""Kata【手写多头注意力层的反向传播（投影、注意力头、softmax；不用 autograd）】: the backward pass of a whole multi-head self-attention layer, by hand (no autograd)."""

import math

import torch
from torch import Tensor


def attention_layer_backward(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    num_heads: int,
    grad_output: Tensor,
    *,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Return (grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o) of multi-head self-attention.

    The forward pass being differentiated (no biases, no dropout), with hs = E // num_heads:
        Q = x @ w_q^T,  K = x @ w_k^T,  V = x @ w_v^T                   [B, T, E] each
            (the nn.Linear convention: a weight is [out_features, in_features] = [E, E])
        split: head h is columns h*hs:(h+1)*hs of Q, K and V            [B, H, T, hs]
        per head: A_h = softmax(Q_h K_h^T / sqrt(hs) + mask) @ V_h      [B, H, T, hs]
        merge: the heads side by side again, head h in columns h*hs:(h+1)*hs
               (A.transpose(1, 2).reshape(B, T, E))                     [B, T, E]
        y = merged @ w_o^T                                              [B, T, E]
    grad_output is dLoss/dy; return dLoss/dx and dLoss/d(each weight), each with the shape
    of what it is the gradient of: grad_x [B, T, E], every grad_w_* [E, E].

    Shapes and rules:
        - x [B, T, E], every weight [E, E], grad_output [B, T, E]; B, T >= 1.
        - The scale is 1 / sqrt(hs), the HEAD size (not E).
        - is_causal=True: position i attends to positions 0..i only (the mask is -inf
          above the diagonal); with is_causal=False every position sees every position.
        - Results have the dtype of x (float32 and float64 are tested).
        - Do not use autograd in any form (torch.autograd.grad, .backward(), torch.func,
          forward-mode AD): the tests look for it, and they call you with tensors that do
          not require grad.

    Conventions (judged apart from the math, as production code would need them):
        - raise ValueError when E is not divisible by num_heads.
        - results follow the device of x (a causal mask made inside too).
        - the inputs are never changed in place.
        - it works under torch.no_grad() (the gradients come from your own formulas).
        - float64 inputs are computed in float64 throughout (no step in float32).

    The chain, from the output back to the input, one step at a time:
        1. Recompute the forward and keep what the backward needs: x, Q, K, V per head,
           the attention weights per head, and the merged heads.
        2. Output projection: y = merged @ w_o^T is linear in both. grad_w_o sums
           grad_output^T @ merged over every batch row and position; grad_merged is
           grad_output @ w_o.
        3. Merge and split are only reshapes: undo the merge on grad_merged, so head h
           gets columns h*hs:(h+1)*hs, as [B, H, T, hs].
        4. Per head, the attention backward (the `attention_backward` kata): grad_V from
           the weights, grad_weights from V, the softmax backward (every score of a row
           moves every weight of that row: mind the row-sum term), then grad_Q and
           grad_K through the scaled product Q_h K_h^T, the scale on both.
           Blocked (causal) positions have weight 0: check what your formulas give there.
        5. Merge the heads' grad_Q, grad_K and grad_V back to [B, T, E], as in step 3
           backwards.
        6. The three input projections: grad_w_q sums grad_Q^T @ x over every batch row
           and position (likewise grad_w_k, grad_w_v), a single [E, E] each.
        7. x feeds all three projections, so grad_x has three paths and sums them:
           grad_Q @ w_q + grad_K @ w_k + grad_V @ w_v.

    Example (T = 1: each position attends only to itself, so only the value path
    reaches x):
        >>> eye = torch.eye(2)
        >>> x = torch.tensor([[[1.0, 2.0]]]); g = torch.tensor([[[1.0, -1.0]]])
        >>> grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o = attention_layer_backward(
        ...     x, eye, eye, eye, eye, 2, g)
        >>> grad_x
        tensor([[[ 1., -1.]]])
        >>> grad_w_o
        tensor([[ 1.,  2.],
                [-1., -2.]])
    """
    # TODO: the sizes; raise ValueError unless E splits evenly into num_heads heads.
    # TODO: recompute the forward: Q, K, V per head, the weights, the merged heads.
    # TODO: the output projection: grad_w_o, then grad_merged split into heads.
    # TODO: per head: grad_v, grad_weights, the softmax backward, grad_q and grad_k.
    # TODO: merge the heads' gradients back to (B, T, E).
    # TODO: the input projections' weights, summed over batch and positions.
    # TODO: grad_x: the sum of its three paths.
    raise NotImplementedError

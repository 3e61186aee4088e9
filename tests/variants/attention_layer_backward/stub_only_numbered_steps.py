"""Variant of attention_layer_backward, written from the stub alone: heads together, numbered backward steps."""

import math

import torch
from torch import Tensor


def _split_heads(t: Tensor, num_heads: int) -> Tensor:
    """[B, T, E] -> [B, H, T, hs]; head h takes columns h*hs:(h+1)*hs."""
    b, t_len, e = t.shape
    return t.reshape(b, t_len, num_heads, e // num_heads).transpose(1, 2)


def _merge_heads(t: Tensor) -> Tensor:
    """[B, H, T, hs] -> [B, T, E]; the inverse of _split_heads."""
    b, h, t_len, hs = t.shape
    return t.transpose(1, 2).reshape(b, t_len, h * hs)


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

    Forward (no biases, no dropout), hs = E // num_heads:
        Q = x @ w_q^T, K = x @ w_k^T, V = x @ w_v^T; split into heads;
        A_h = softmax(Q_h K_h^T / sqrt(hs) + mask) @ V_h; merge; y = merged @ w_o^T.
    grad_output is dLoss/dy. Every gradient is derived by hand (explicit chain rule)
    and returned with the dtype and device of x.
    Raises ValueError when E is not divisible by num_heads (or on malformed shapes).
    """
    # ---- sizes and checks -------------------------------------------------------
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, E], got shape {tuple(x.shape)}")
    B, T, E = x.shape
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    if E % num_heads != 0:
        raise ValueError(f"embedding size {E} is not divisible by num_heads={num_heads}")
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if tuple(w.shape) != (E, E):
            raise ValueError(f"{name} must be [{E}, {E}], got shape {tuple(w.shape)}")
    if tuple(grad_output.shape) != (B, T, E):
        raise ValueError(
            f"grad_output must be [{B}, {T}, {E}], got shape {tuple(grad_output.shape)}"
        )
    H = num_heads
    hs = E // H
    scale = 1.0 / math.sqrt(hs)

    # Work in x's dtype/device; .to() returns new tensors or the same ones, which we
    # never write into, so the inputs are left untouched.
    dtype, device = x.dtype, x.device
    w_q, w_k, w_v, w_o = (w.to(device=device, dtype=dtype) for w in (w_q, w_k, w_v, w_o))
    g_y = grad_output.to(device=device, dtype=dtype)

    # ---- 1. recompute the forward ------------------------------------------------
    q = _split_heads(x @ w_q.T, H)  # [B, H, T, hs]
    k = _split_heads(x @ w_k.T, H)
    v = _split_heads(x @ w_v.T, H)

    scores = (q @ k.transpose(-2, -1)) * scale  # [B, H, T, T]
    if is_causal:
        blocked = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
        scores = scores.masked_fill(blocked, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # diagonal always visible: no all -inf rows
    merged = _merge_heads(probs @ v)  # [B, T, E]

    # ---- 2. output projection ----------------------------------------------------
    # y[b,t,i] = sum_j merged[b,t,j] * w_o[i,j]
    grad_w_o = g_y.reshape(-1, E).T @ merged.reshape(-1, E)  # [E, E]
    grad_merged = g_y @ w_o  # [B, T, E]

    # ---- 3. undo the merge ---------------------------------------------------------
    g_a = _split_heads(grad_merged, H)  # [B, H, T, hs]

    # ---- 4. attention backward per head (batched over B and H) -------------------
    g_v = probs.transpose(-2, -1) @ g_a  # [B, H, T, hs]
    g_probs = g_a @ v.transpose(-2, -1)  # [B, H, T, T]
    # softmax backward: dS_ij = P_ij * (dP_ij - sum_k P_ik dP_ik).
    # Blocked entries have P = 0, so their score gradient is exactly 0.
    row_dot = (g_probs * probs).sum(dim=-1, keepdim=True)
    g_scores = probs * (g_probs - row_dot)
    g_q = (g_scores @ k) * scale
    g_k = (g_scores.transpose(-2, -1) @ q) * scale

    # ---- 5. merge the heads' gradients -------------------------------------------
    g_Q = _merge_heads(g_q)  # [B, T, E]
    g_K = _merge_heads(g_k)
    g_V = _merge_heads(g_v)

    # ---- 6. input projection weights ---------------------------------------------
    x2 = x.reshape(-1, E)
    grad_w_q = g_Q.reshape(-1, E).T @ x2
    grad_w_k = g_K.reshape(-1, E).T @ x2
    grad_w_v = g_V.reshape(-1, E).T @ x2

    # ---- 7. grad_x: three paths ------------------------------------------------------
    grad_x = g_Q @ w_q + g_K @ w_k + g_V @ w_v

    return (
        grad_x.contiguous(),
        grad_w_q.contiguous(),
        grad_w_k.contiguous(),
        grad_w_v.contiguous(),
        grad_w_o.contiguous(),
    )

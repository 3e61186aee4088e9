"""Variant of moe, written from the stub alone: choices sorted by expert, accumulated in float32 or float64."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _check_top_k(top_k: int, num_experts: int) -> None:
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"need 1 <= top_k <= num_experts, got top_k={top_k}, num_experts={num_experts}")


def _routing_dtype(dtype: torch.dtype) -> torch.dtype:
    # float32 for half precision / float32, float64 stays float64.
    return torch.promote_types(dtype, torch.float32)


class Expert(nn.Module):
    """One SwiGLU expert: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoELayer(nn.Module):
    """Sparse mixture of SwiGLU experts with Mixtral's top-k routing.

    forward(x [B, T, C]) -> (y [B, T, C], router_logits [B*T, E]).
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2):
        super().__init__()
        _check_top_k(top_k, num_experts)
        self.d_model = d_model
        self.d_ff = d_ff
        self.num_experts = num_experts
        self.top_k = top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, d_ff) for _ in range(num_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"expected x of shape [B, T, {self.d_model}], got {tuple(x.shape)}")
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)                      # token b*T + t is x[b, t]

        router_logits = self.router(tokens)               # [N, E], x's dtype
        acc_dtype = _routing_dtype(router_logits.dtype)
        probs = torch.softmax(router_logits.to(acc_dtype), dim=-1)
        top_w, top_e = torch.topk(probs, self.top_k, dim=-1)       # [N, k] each
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)            # renormalise the k kept

        out = torch.zeros(tokens.shape, dtype=acc_dtype, device=x.device)

        # Group the (token, slot) assignments by expert: sort the flattened choices.
        flat_e = top_e.reshape(-1)                                  # [N*k]
        order = torch.argsort(flat_e, stable=True)
        counts = torch.bincount(flat_e, minlength=self.num_experts).tolist()
        token_of = order // self.top_k                              # token index of each assignment
        weight_of = top_w.reshape(-1)[order]                        # its routing weight

        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            idx = token_of[start:start + n]
            w = weight_of[start:start + n]
            start += n
            expert_out = self.experts[e](tokens[idx])               # only the rows routed to e
            out.index_add_(0, idx, expert_out.to(acc_dtype) * w.unsqueeze(-1))

        y = out.to(x.dtype).reshape(B, T, C)
        return y, router_logits


def load_balancing_loss(router_logits: Tensor, num_experts: int, top_k: int) -> Tensor:
    """Mixtral's auxiliary load-balancing loss for one layer's router logits [N, E]:

        loss = E * sum_{j<k, e<E} f[j, e] * P[e]

    f[j, e] is the (gradient-free) fraction of tokens whose j-th choice is e; P[e] is the
    mean softmax probability of expert e. Returned as a 0-d tensor in router_logits' dtype.
    """
    _check_top_k(top_k, num_experts)
    if router_logits.shape[-1] != num_experts:
        raise ValueError(
            f"router_logits has {router_logits.shape[-1]} experts, num_experts={num_experts}")

    logits = router_logits.reshape(-1, num_experts)
    probs = torch.softmax(logits.to(_routing_dtype(logits.dtype)), dim=-1)    # [N, E]

    with torch.no_grad():
        _, chosen = torch.topk(probs, top_k, dim=-1)                            # [N, k], ordered
        f = F.one_hot(chosen, num_experts).to(probs.dtype).mean(dim=0)          # [k, E]
    P = probs.mean(dim=0)                                                       # [E]

    loss = num_experts * (f * P.unsqueeze(0)).sum()
    return loss.to(router_logits.dtype)

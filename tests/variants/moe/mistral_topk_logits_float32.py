"""Variant of moe, as in Mistral's reference code: top-k of the LOGITS, then a softmax over those k in float32 (Mistral's
whatever x's dtype; float64 kept for float64 x, as the kata's float64 convention asks), boolean masks per expert and
y[rows] += ...; the loss from per-expert token counts."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Expert(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class MoELayer(nn.Module):
    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2):
        super().__init__()
        if top_k < 1 or top_k > num_experts:
            raise ValueError("need 1 <= top_k <= num_experts")
        self.top_k = top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, d_ff) for _ in range(num_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        shape = x.shape
        flat = x.view(-1, shape[-1])
        gate_logits = self.router(flat)
        top_logits, chosen = torch.topk(gate_logits, self.top_k)
        # softmax over the k kept logits == the k largest probabilities renormalised
        weights = F.softmax(top_logits, dim=1, dtype=torch.promote_types(x.dtype, torch.float)).to(x.dtype)
        results = torch.zeros_like(flat)
        for i, expert in enumerate(self.experts):
            hit = chosen == i  # (N, k): at most one True per row
            rows = hit.any(dim=1)
            if not bool(rows.any()):
                continue
            w = (weights * hit).sum(dim=1)[rows]
            results[rows] += w[:, None] * expert(flat[rows])
        return results.view(shape), gate_logits


def load_balancing_loss(router_logits: Tensor, num_experts: int, top_k: int) -> Tensor:
    if not 0 < top_k <= num_experts:
        raise ValueError("need 1 <= top_k <= num_experts")
    probs = torch.softmax(router_logits.to(torch.promote_types(router_logits.dtype, torch.float)), dim=-1)
    chosen = torch.topk(router_logits, top_k, dim=-1).indices
    counts = torch.zeros(num_experts, dtype=probs.dtype, device=probs.device)
    counts = counts.scatter_add(0, chosen.flatten(), torch.ones(chosen.numel(), dtype=probs.dtype, device=probs.device))
    fraction = counts / router_logits.shape[0]  # sum over j of f[j, e]
    return (num_experts * (fraction * probs.mean(dim=0)).sum()).to(router_logits.dtype)

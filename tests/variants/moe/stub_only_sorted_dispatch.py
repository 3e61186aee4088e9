"""Variant of moe, written from the stub alone: the N * top_k assignments sorted by expert, split into one contiguous chunk per expert (every expert called, idle ones on 0 rows), scattered back with scatter_add; einsum-free, no Python loop over tokens."""

import torch
from torch import Tensor, nn


class Expert(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def _routing(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(probabilities [N, E] in float32 or float64, the top-k experts [N, k])."""
    probs = logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(-1)
    return probs, probs.argsort(dim=-1, descending=True)[:, :k]


class MoELayer(nn.Module):
    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2):
        super().__init__()
        if not (1 <= top_k and top_k <= num_experts):
            raise ValueError("top_k must lie in [1, num_experts]")
        self.k = top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList()
        for _ in range(num_experts):
            self.experts.append(Expert(d_model, d_ff))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, T, C = x.shape
        tokens = x.flatten(0, 1)  # (N, C)
        logits = self.router(tokens)  # (N, E)
        probs, top = _routing(logits, self.k)
        w = probs.gather(1, top)
        w = (w / w.sum(-1, keepdim=True)).to(x.dtype)  # (N, k)
        flat_expert = top.reshape(-1)  # (N*k,) assignment a = token * k + slot
        order = torch.argsort(flat_expert, stable=True)
        token_of = order // self.k  # (N*k,)
        sizes = torch.bincount(flat_expert, minlength=len(self.experts)).tolist()
        chunks = tokens[token_of].split(sizes)
        out = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, chunks)])  # (N*k, C)
        out = out * w.reshape(-1)[order, None]
        y = torch.zeros_like(tokens).scatter_add(0, token_of[:, None].expand(-1, C), out)
        return y.reshape(B, T, C), logits


def load_balancing_loss(router_logits: Tensor, num_experts: int, top_k: int) -> Tensor:
    if not (1 <= top_k and top_k <= num_experts):
        raise ValueError("top_k must lie in [1, num_experts]")
    probs, top = _routing(router_logits, top_k)
    N = router_logits.shape[0]
    f = torch.zeros(top_k, num_experts, dtype=probs.dtype, device=probs.device)
    f = f.scatter_add(1, top.T, torch.full(top.T.shape, 1.0 / N, dtype=probs.dtype, device=probs.device))
    return (num_experts * (f @ probs.mean(0)).sum()).to(router_logits.dtype)

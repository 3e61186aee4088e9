"""Variant of moe, in Hugging Face's Mixtral style: a one-hot expert mask permuted to [E, k, N], torch.where per expert, index_add_ back; the loss exactly as load_balancing_loss_func."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MixtralExpert(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


class MoELayer(nn.Module):
    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k={top_k} with {num_experts} experts")
        self.num_experts, self.top_k, self.d_model = num_experts, top_k, d_model
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralExpert(d_model, d_ff) for _ in range(num_experts)])

    def forward(self, hidden_states: Tensor) -> tuple[Tensor, Tensor]:
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.router(hidden_states)
        compute = torch.float64 if hidden_states.dtype == torch.float64 else torch.float32
        routing_weights = F.softmax(router_logits.to(compute), dim=1)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)  # (E, k, N)
        for expert_idx in range(self.num_experts):
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = self.experts[expert_idx](current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        return final_hidden_states.reshape(batch_size, sequence_length, hidden_dim), router_logits


def load_balancing_loss(router_logits: Tensor, num_experts: int, top_k: int) -> Tensor:
    if top_k < 1 or top_k > num_experts:
        raise ValueError(f"top_k={top_k} with {num_experts} experts")
    compute = torch.float64 if router_logits.dtype == torch.float64 else torch.float32
    routing_weights = F.softmax(router_logits.to(compute), dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(compute), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return (overall_loss * num_experts).to(router_logits.dtype)

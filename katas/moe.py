"""Kata【稀疏混合专家（MoE）：Mixtral 的 top-k 路由与负载均衡损失】: a sparse mixture-of-experts layer (Mixtral's top-k routing of SwiGLU experts) and its load-balancing loss."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Expert(nn.Module):
    """One SwiGLU expert: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.

    gate_proj, up_proj: nn.Linear(d_model, d_ff, bias=False); down_proj: nn.Linear(d_ff,
    d_model, bias=False). silu(z) = z * sigmoid(z) (F.silu), on gate_proj(x) only.
    forward(x [n, C]) -> [n, C], for any number n of tokens (0 included).
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        # TODO: gate_proj and up_proj (d_model -> d_ff), down_proj (d_ff -> d_model), no bias.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: SiLU on the gate, times the up projection, projected back down.
        raise NotImplementedError


class MoELayer(nn.Module):
    """A sparse mixture of SwiGLU experts with Mixtral's top-k routing.

    Sizes: B batch, T length, C = d_model, E = num_experts, k = top_k, N = B * T tokens.

    __init__(d_model, d_ff, num_experts, top_k=2)
        - raise ValueError unless 1 <= top_k <= num_experts.
        - submodules, named as the grader copies weights into them (nn.Linear layout,
          weight [out, in], no bias anywhere):
            router:  nn.Linear(d_model, num_experts, bias=False)
            experts: nn.ModuleList of num_experts DIFFERENT Expert(d_model, d_ff) modules,
                     each with gate_proj, up_proj (d_model -> d_ff) and down_proj (d_ff -> d_model)
          so the parameters are router.weight and experts.{e}.{gate,up,down}_proj.weight.

    forward(x [B, T, C]) -> (y [B, T, C], router_logits [N, E])
        - the tokens are x.reshape(N, C): token b * T + t is x[b, t].
        - router_logits = router(tokens), returned as they are (before any softmax), in x's
          dtype, one row per token in that order.
        - routing, as Mixtral: probabilities = softmax of router_logits over the experts,
          computed in float32 or better (float32 for half-precision x); keep each token's
          top_k largest; renormalise those k to sum to 1.
        - y[token] = sum over its k chosen experts e of weight[token, e] * experts[e](token).
        - sparse: each expert is called as a module, self.experts[e](rows), on the tokens
          routed to it ONLY (so each token passes through exactly top_k experts); an expert
          that no token chose may be skipped or called on 0 rows. Never run every expert on
          every token (the grader counts the rows each expert module receives).
        - y has x's dtype and device; x is not modified. Values and gradients are judged.
        - Ties between routing probabilities do not occur in the tests.

    Conventions (judged apart from the math, as production code would need them):
        - raise ValueError unless 1 <= top_k <= num_experts.
        - top_k defaults to 2: MoELayer(d_model, d_ff, num_experts) routes each token to 2 experts.
        - results follow the inputs' device: y and router_logits on x's.
        - x is not modified.
        - float16 and bfloat16 work: the routing softmax in float32, y and router_logits in x's dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int = 2):
        super().__init__()
        # TODO: raise ValueError unless 1 <= top_k <= num_experts.
        # TODO: the router (d_model -> num_experts, no bias) and num_experts distinct experts.
        raise NotImplementedError

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # TODO: router logits per token, then a softmax over the experts in float32 or better.
        # TODO: keep the top_k largest per token and renormalise them to sum to 1.
        # TODO: run each expert on its own tokens only; add its weighted output back to those rows.
        raise NotImplementedError


def load_balancing_loss(router_logits: Tensor, num_experts: int, top_k: int) -> Tensor:
    """Mixtral's auxiliary load-balancing loss for one layer's router logits.

    router_logits [N, num_experts] (what MoELayer returns) -> a 0-d tensor:

        loss = num_experts * sum over j < top_k, e < num_experts of f[j, e] * P[e]

    - probabilities = softmax of router_logits over the experts (dim -1), in float32 or
      better, as in MoELayer; each token's top_k experts are the top_k largest of them.
    - f[j, e]: the fraction of the N tokens whose j-th choice (j = 0 the largest) is expert
      e. Summed over j, it is the fraction of tokens that chose e at all; it carries no
      gradient (a count).
    - P[e]: the mean over the N tokens of the probability of expert e (all experts, before
      any top-k): the gradient flows to router_logits through P only.
    - evenly spread routing gives top_k; the loss is returned in router_logits' dtype,
      on its device; router_logits is not modified.
    - raise ValueError unless 1 <= top_k <= num_experts.
    As Hugging Face's load_balancing_loss_func for one layer and no attention mask.

    Conventions (judged apart from the math, as production code would need them):
        - load_balancing_loss raises ValueError unless 1 <= top_k <= num_experts.
        - the loss is returned in router_logits' dtype (float16 and bfloat16 included), on its device.
        - router_logits is not modified.
        - float64 inputs are computed in float64 throughout (no step in float32).
    """
    # TODO: raise ValueError unless 1 <= top_k <= num_experts.
    # TODO: the probabilities (float32 or better) and each token's top_k experts, in order.
    # TODO: f [k, E]: the fraction of tokens whose j-th choice is e; P [E]: the mean probability.
    raise NotImplementedError

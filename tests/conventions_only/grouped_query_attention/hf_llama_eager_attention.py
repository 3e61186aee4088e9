"""grouped_query_attention: Hugging Face's LlamaAttention with eager_attention_forward and
repeat_kv (transformers/models/llama/modeling_llama.py), glued to the signature.

The math is right; one convention is not kept: HF takes the softmax in float32 and casts the
weights back (softmax(..., dtype=torch.float32).to(query.dtype)), so a float64 input loses
its precision there (the float64 rule). Expected: every core test passes, only the float64
convention fails (issue 21: it once failed 4-5 core tests by about 1.2e-7).

Glue only: no rotary embedding (the kata has none), the masks of the signature turned into
HF's additive mask (the dtype's lowest value where blocked), the ValueErrors the stub asks.
"""

import torch
from torch import nn


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """
    This is the equivalent of torch.repeat_interleave(x, dim=1, repeats=n_rep). The hidden states go from (batch,
    num_key_value_heads, seqlen, head_dim) to (batch, num_attention_heads, seqlen, head_dim)
    """
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask

    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights


def additive_mask(attn_mask, is_causal, T, dtype, device):
    """Glue: the signature's masks as HF's 4-D additive mask (None when nothing is blocked)."""
    lowest = torch.finfo(dtype).min
    if is_causal:
        blocked = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
        return torch.zeros(T, T, dtype=dtype, device=device).masked_fill(blocked, lowest)[None, None]
    if attn_mask is None:
        return None
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=dtype, device=device).masked_fill(~attn_mask, lowest)
    while attn_mask.dim() < 4:
        attn_mask = attn_mask[None]
    return attn_mask.to(dtype)


class GroupedQueryAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_kv_heads=None, bias=False):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if embed_dim % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"{embed_dim=} must divide by {num_heads=}, which must divide by {num_kv_heads=}")
        self.head_dim = embed_dim // num_heads
        self.num_key_value_groups = num_heads // num_kv_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(embed_dim, num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * self.head_dim, embed_dim, bias=bias)

    def forward(self, x, attn_mask=None, is_causal=False):
        if attn_mask is not None and is_causal:
            raise ValueError("give attn_mask or is_causal=True, not both")
        hidden_states = x
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        attention_mask = additive_mask(attn_mask, is_causal, x.shape[1], x.dtype, x.device)
        attn_output, attn_weights = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output

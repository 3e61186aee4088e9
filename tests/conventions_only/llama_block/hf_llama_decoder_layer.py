"""llama_block: Hugging Face's LlamaDecoderLayer with LlamaRMSNorm, LlamaRotaryEmbedding,
LlamaAttention (eager_attention_forward, repeat_kv) and LlamaMLP
(transformers/models/llama/modeling_llama.py), glued to the signature.

The math is right; one convention is not kept: HF normalises in float32 (RMSNorm), takes the
rotary angles in float32 and the softmax in float32, so a float64 input loses its precision
(the float64 rule). Expected: every core test passes, only the float64 convention fails. Its
rotary embedding opens torch.autocast(..., enabled=False), which raises on the meta device:
the device check must say it could not judge, never fail it (issue 21).

Glue only: the names the stub asks for (attention_norm, attention, ffn_norm, feed_forward),
the positions turned into HF's position embeddings inside the attention, the causal mask
HF's model would build (the dtype's lowest value above the diagonal), Meta's d_ff rule and
the ValueErrors the stub asks.
"""

import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        LlamaRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotary_cos_sin(inv_freq, x, position_ids, attention_scaling=1.0):
    # LlamaRotaryEmbedding.forward
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].float()

    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with torch.autocast(device_type=device_type, enabled=False):  # Force float32
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * attention_scaling
        sin = emb.sin() * attention_scaling

    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
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


class LlamaAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, num_key_value_heads, rope_theta):
        super().__init__()
        self.head_dim = hidden_size // num_attention_heads
        self.num_key_value_groups = num_attention_heads // num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(hidden_size, num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_attention_heads * self.head_dim, hidden_size, bias=False)
        # _compute_default_rope_parameters
        inv_freq = 1.0 / (rope_theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, hidden_states, positions=None):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        T = hidden_states.shape[1]
        if positions is None:  # glue: HF's model makes position_ids and the causal mask
            positions = torch.arange(T, device=hidden_states.device)
        cos, sin = rotary_cos_sin(self.inv_freq, hidden_states, positions[None, :])
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        blocked = torch.ones(T, T, dtype=torch.bool, device=hidden_states.device).triu(1)
        attention_mask = torch.zeros(T, T, dtype=hidden_states.dtype, device=hidden_states.device)
        attention_mask = attention_mask.masked_fill(blocked, torch.finfo(hidden_states.dtype).min)[None, None]

        attn_output, _ = eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.act_fn = nn.functional.silu

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


class LlamaBlock(nn.Module):
    def __init__(
        self, d_model, num_heads, num_kv_heads=None, d_ff=None, multiple_of=256, rope_base=10000.0, norm_eps=1e-6
    ):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if d_model % num_heads or num_heads % num_kv_heads or (d_model // num_heads) % 2:
            raise ValueError("d_model must divide by num_heads, num_heads by num_kv_heads, and the head size be even")
        if d_ff is None:  # Meta's FeedForward
            d_ff = int(2 * (4 * d_model) / 3)
            d_ff = multiple_of * ((d_ff + multiple_of - 1) // multiple_of)
        self.attention_norm = LlamaRMSNorm(d_model, eps=norm_eps)
        self.attention = LlamaAttention(d_model, num_heads, num_kv_heads, rope_base)
        self.ffn_norm = LlamaRMSNorm(d_model, eps=norm_eps)
        self.feed_forward = LlamaMLP(d_model, d_ff)

    def forward(self, hidden_states, positions=None):
        # LlamaDecoderLayer.forward
        residual = hidden_states
        hidden_states = self.attention_norm(hidden_states)
        hidden_states = self.attention(hidden_states, positions)
        hidden_states = residual + hidden_states

        residual = hidden_states
        hidden_states = self.ffn_norm(hidden_states)
        hidden_states = self.feed_forward(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states

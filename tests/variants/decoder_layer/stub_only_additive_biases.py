"""Variant of decoder_layer, written from the stub alone: every mask an additive bias, summed; einsum heads."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TransformerDecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, and a feed-forward
    network, each in a residual branch with a LayerNorm.

    Sizes: B batch, T target length, S memory (source) length, E = d_model, H = nhead,
    hs = E // H the head size.

    __init__(d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
             layer_norm_eps=1e-5, norm_first=False, bias=True)
        - raise ValueError when d_model is not divisible by nhead.
        - submodules named as in PyTorch, so the grader can copy its weights into yours:
            self_attn, multihead_attn:  multi-head attention, each with q_proj, k_proj,
                                        v_proj, out_proj: nn.Linear(d_model, d_model, bias=bias)
            linear1:                    nn.Linear(d_model, dim_feedforward, bias=bias)
            linear2:                    nn.Linear(dim_feedforward, d_model, bias=bias)
            norm1, norm2, norm3:        nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        - activation: "relu" or "gelu" (the exact, erf GELU).
        - bias=False: no bias in any Linear or LayerNorm.
        - dropout: on the attention weights, after the activation, and on each branch's
          output, in train() mode only; eval() disables it.

    forward(tgt [B, T, E], memory [B, S, E], tgt_mask=None, memory_mask=None,
            tgt_key_padding_mask=None, memory_key_padding_mask=None,
            tgt_is_causal=False, memory_is_causal=False) -> [B, T, E]
        sa(x) = self_attn(x, x, x)                 the target attends to itself
        ca(x) = multihead_attn(x, memory, memory)  the target attends to the memory
        ff(x) = linear2(dropout(activation(linear1(x))))
        norm_first=False (post-norm):  x = norm1(x + sa(x)); x = norm2(x + ca(x)); x = norm3(x + ff(x))
        norm_first=True  (pre-norm):   x = x + sa(norm1(x)); x = x + ca(norm2(x)); x = x + ff(norm3(x))
        (pre-norm normalises the target only; the memory goes into ca as it is.)
        Masks follow PyTorch's nn.* modules, NOT F.scaled_dot_product_attention:
        - a BOOLEAN mask is True where attention is BLOCKED (SDPA: True = may attend);
        - a FLOAT mask is ADDED to the scores (0 = no change, -inf = blocked).
        - tgt_mask [T, T] and tgt_key_padding_mask [B, T] go to the self-attention;
          memory_mask [T, S] and memory_key_padding_mask [B, S] to the cross-attention.
        - tgt_is_causal=True blocks target key j for query i when j > i, by itself;
          memory_is_causal=True does the same for memory key j (top-left aligned when T != S).
          PyTorch only takes them as hints that the masks are causal and wants the masks too.
          Given together with tgt_mask (memory_mask), both apply: a key is blocked when
          either blocks it.
        - a query row whose every key is blocked is undefined and not judged.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_first: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        if d_model % nhead != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")

        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias)

        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)

        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

        self.norm_first = norm_first
        self.activation_name = activation
        self.activation = F.relu if activation == "relu" else F.gelu  # F.gelu default = exact erf

    # --- the three residual branches -------------------------------------------------------
    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask,
                           key_padding_mask=key_padding_mask, is_causal=is_causal)
        return self.dropout1(x)

    def _ca_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal)
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._ca_block(self.norm2(x), memory, memory_mask,
                                   memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._ca_block(x, memory, memory_mask,
                                              memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x


def _to_additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """PyTorch nn.* convention -> additive float mask: bool True = blocked (-inf), float = added."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    return mask.to(dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (batch-first); forward returns the output [B, L, E] only."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, n, hs)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        B, L, E = query.shape
        S = key.shape[1]
        H = self.num_heads

        q = self._split_heads(self.q_proj(query))   # (B, H, L, hs)
        k = self._split_heads(self.k_proj(key))     # (B, H, S, hs)
        v = self._split_heads(self.v_proj(value))   # (B, H, S, hs)

        scores = torch.einsum("bhld,bhsd->bhls", q, k) / math.sqrt(self.head_dim)

        # Build one additive bias broadcastable to (B, H, L, S).
        bias = None
        if is_causal:
            causal = torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1)
            bias = _to_additive(causal, scores.dtype)  # (L, S), top-left aligned
        if attn_mask is not None:
            m = _to_additive(attn_mask, scores.dtype)
            if m.dim() == 3:  # PyTorch also accepts (B*H, L, S)
                m = m.view(B, H, L, S)
            bias = m if bias is None else bias + m
        if key_padding_mask is not None:
            m = _to_additive(key_padding_mask, scores.dtype).view(B, 1, 1, S)
            bias = m if bias is None else bias + m
        if bias is not None:
            scores = scores + bias

        weights = torch.softmax(scores, dim=-1)
        weights = F.dropout(weights, p=self.dropout, training=self.training)

        out = torch.einsum("bhls,bhsd->bhld", weights, v)   # (B, H, L, hs)
        out = out.transpose(1, 2).reshape(B, L, E)          # heads side by side
        return self.out_proj(out)

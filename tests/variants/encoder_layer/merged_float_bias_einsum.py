"""Variant of encoder_layer (correct): every mask merged once into an additive float bias
(finfo.min where blocked), einsum attention, F.layer_norm called with the norms' parameters,
and the activation looked up in a dict."""
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class Attention(nn.Module):
    def __init__(self, d, h, p, bias):
        super().__init__()
        if d % h:
            raise ValueError(f"nhead={h} does not divide d_model={d}")
        self.h = h
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d, bias=bias) for _ in range(4))
        self.drop = nn.Dropout(p)

    def forward(self, x, bias):
        q, k, v = (proj(x).unflatten(-1, (self.h, -1)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
        if bias is not None:
            scores = scores + bias
        out = torch.einsum("bhqk,bkhd->bqhd", self.drop(scores.softmax(-1)), v)
        return self.out_proj(out.flatten(-2))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = Attention(d_model, nhead, dropout, bias)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.drop, self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)
        self.act = ACTIVATIONS[activation]
        self.norm_first = norm_first

    @staticmethod
    def _bias(x, src_mask, padding, is_causal):
        B, S, _ = x.shape
        lowest = torch.finfo(x.dtype).min
        if src_mask is None and padding is None and not is_causal:
            return None
        bias = torch.zeros(B, 1, S, S, dtype=x.dtype, device=x.device)
        if is_causal:
            bias = bias.masked_fill(torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1), lowest)
        for mask in (src_mask, None if padding is None else padding[:, None, None, :]):
            if mask is None:
                continue
            bias = bias.masked_fill(mask, lowest) if mask.dtype == torch.bool else bias + mask
        return bias.clamp(min=lowest)

    def _norm(self, norm, x):
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        bias = self._bias(src, src_mask, src_key_padding_mask, is_causal)
        sa = lambda t: self.drop1(self.self_attn(t, bias))  # noqa: E731
        ff = lambda t: self.drop2(self.linear2(self.drop(self.act(self.linear1(t)))))  # noqa: E731
        x = src
        if self.norm_first:
            x = x + sa(self._norm(self.norm1, x))
            return x + ff(self._norm(self.norm2, x))
        x = self._norm(self.norm1, x + sa(x))
        return self._norm(self.norm2, x + ff(x))

"""Variant of causal_lm (correct): the embedding tied TO the head (lm_head registered first), attention
with einsum and an additive 0/-inf bias, the cache a tuple of tuples, the loss by hand (log_softmax,
gather, a masked mean), top-k by sorting and sampling by Gumbel-max with the generator's uniforms."""

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, past):
        B, T, C = x.shape
        H, D = self.h, C // self.h
        q, k, v = (p(x).reshape(B, T, H, D).permute(0, 2, 1, 3) for p in (self.q_proj, self.k_proj, self.v_proj))
        if past is not None:
            k, v = torch.cat((past[0], k), 2), torch.cat((past[1], v), 2)
        S = k.shape[2]
        held = S - T
        rows = torch.arange(held, S, device=x.device)[:, None]
        cols = torch.arange(S, device=x.device)[None, :]
        bias = torch.zeros(T, S, dtype=x.dtype, device=x.device).masked_fill(cols > rows, float("-inf"))
        att = torch.einsum("bhtd,bhsd->bhts", q, k) / D**0.5 + bias
        y = torch.einsum("bhts,bhsd->bhtd", att.softmax(-1), v)
        return self.out_proj(y.permute(0, 2, 1, 3).reshape(B, T, C)), (k, v)


class Layer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, num_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Module()
        self.mlp.up_proj = nn.Linear(d_model, d_ff)
        self.mlp.down_proj = nn.Linear(d_ff, d_model)

    def forward(self, x, past):
        a, kv = self.attn(self.ln_1(x), past)
        x = x + a
        h = self.mlp.up_proj(self.ln_2(x))
        return x + self.mlp.down_proj(0.5 * h * (1 + torch.erf(h / 2**0.5))), kv


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, num_layers, max_len, d_ff=None):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("num_heads must divide d_model")
        self.max_len = max_len
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.token_embedding.weight = self.lm_head.weight
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([Layer(d_model, num_heads, d_ff or 4 * d_model) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, input_ids, targets=None, cache=None):
        start = cache[0][0].shape[2] if cache else 0
        T = input_ids.shape[1]
        if start + T > self.max_len:
            raise ValueError("too many tokens for max_len")
        x = self.token_embedding(input_ids) + self.position_embedding.weight[start : start + T]
        out = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, cache[i] if cache else None)
            out.append(kv)
        logits = F.linear(self.ln_f(x), self.lm_head.weight)
        loss = None
        if targets is not None:
            keep = targets != -100
            logp = logits.log_softmax(-1)
            picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            loss = -(picked * keep).sum() / keep.sum()
        return logits, loss, tuple(out)

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens, *, temperature=0.0, top_k=None, generator=None, use_cache=True):
        if temperature < 0 or input_ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError("bad temperature, or the result would exceed max_len")
        seq, cache = input_ids.clone(), None
        while seq.shape[1] < input_ids.shape[1] + max_new_tokens:
            if use_cache and cache is not None:
                logits, _, cache = self(seq[:, -1:], cache=cache)
            else:
                logits, _, new = self(seq)
                cache = new if use_cache else None
            last = logits[:, -1]
            if temperature == 0:
                nxt = last.max(-1).indices
            else:
                scores = last / temperature
                if top_k is not None and top_k < scores.shape[-1]:
                    cut = scores.sort(-1, descending=True).values[:, top_k - 1 : top_k]
                    scores = torch.where(scores >= cut, scores, torch.full_like(scores, float("-inf")))
                u = torch.rand(scores.shape, generator=generator, dtype=scores.dtype, device=scores.device)
                nxt = (scores - torch.log(-torch.log(u))).argmax(-1)
            seq = torch.cat((seq, nxt[:, None]), 1)
        return seq

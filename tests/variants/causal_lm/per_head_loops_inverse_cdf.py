"""Variant of causal_lm (correct): LayerNorm written by hand, attention one head at a time with a
finfo.min fill, the cache a list of [k, v] lists, the embedding read by indexing its weight, the loss
as F.nll_loss of log_softmax, generation in a torch.no_grad() block with top-k by scatter and
inverse-CDF sampling (torch.rand with the generator, then searchsorted)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class SelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, past):
        B, T, C = x.shape
        hs = C // self.num_heads
        q = self.q_proj(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.num_heads, hs).transpose(1, 2)
        if past:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        S = k.size(2)
        query_pos = torch.arange(S - T, S, device=x.device).view(T, 1)
        key_pos = torch.arange(S, device=x.device).view(1, S)
        outs = []
        for h in range(self.num_heads):
            s = q[:, h] @ k[:, h].transpose(1, 2) / math.sqrt(hs)  # (B, T, S)
            s = torch.where(key_pos <= query_pos, s, torch.finfo(s.dtype).min)
            outs.append(torch.softmax(s, -1) @ v[:, h])  # (B, T, hs)
        return self.out_proj(torch.cat(outs, dim=-1)), [k, v]


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff)
        self.down_proj = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x), approximate="none"))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.ln_1, self.attn = Norm(d_model), SelfAttention(d_model, num_heads)
        self.ln_2, self.mlp = Norm(d_model), FeedForward(d_model, d_ff)

    def forward(self, x, past):
        y, kv = self.attn(self.ln_1(x), past)
        x = x + y
        return x + self.mlp(self.ln_2(x)), kv


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size, d_model, num_heads, num_layers, max_len, d_ff=None):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model % num_heads != 0")
        d_ff = d_ff if d_ff is not None else 4 * d_model
        self.max_len = max_len
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList()
        for _ in range(num_layers):
            self.blocks.append(DecoderBlock(d_model, num_heads, d_ff))
        self.ln_f = Norm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, input_ids, targets=None, cache=None):
        past_len = 0 if cache is None else cache[0][0].shape[-2]
        T = input_ids.shape[-1]
        if past_len + T > self.max_len:
            raise ValueError(f"{past_len} + {T} > max_len {self.max_len}")
        pos = torch.arange(T, device=input_ids.device) + past_len
        x = self.token_embedding.weight[input_ids] + self.position_embedding(pos)[None]
        presents = []
        for i in range(len(self.blocks)):
            x, kv = self.blocks[i](x, None if cache is None else cache[i])
            presents.append(kv)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            logp = F.log_softmax(logits, dim=-1)
            loss = F.nll_loss(logp.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss, presents

    def generate(self, input_ids, max_new_tokens, *, temperature=0.0, top_k=None, generator=None, use_cache=True):
        if temperature < 0:
            raise ValueError("temperature < 0")
        if input_ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError("longer than max_len")
        out = input_ids
        with torch.no_grad():
            cache = None
            for step in range(max_new_tokens):
                if not use_cache:
                    logits = self(out)[0]
                elif step == 0:
                    logits, _, cache = self(out)
                else:
                    logits, _, cache = self(out[:, -1:], cache=cache)
                logits = logits[:, -1]
                if temperature == 0:
                    nxt = torch.argmax(logits, dim=-1, keepdim=True)
                else:
                    logits = logits / temperature
                    if top_k is not None:
                        values, indices = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)
                        logits = torch.full_like(logits, float("-inf")).scatter(-1, indices, values)
                    probs = torch.softmax(logits, dim=-1)
                    cdf = probs.cumsum(-1)
                    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=probs.dtype)
                    nxt = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=probs.shape[-1] - 1)
                out = torch.cat([out, nxt], dim=1)
        return out

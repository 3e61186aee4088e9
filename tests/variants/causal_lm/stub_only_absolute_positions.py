"""Variant of causal_lm, written from the stub alone: masks from absolute positions, one generate loop."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TinyCausalLM(nn.Module):
    """GPT-2 style decoder-only LM: token + learned position embeddings, pre-norm causal
    blocks, final LayerNorm, and an output head tied to the token embedding.

    forward(input_ids [B, T], targets=None, cache=None) -> (logits [B, T, V], loss, cache)
    with cache a list of one (k, v) pair per block, each [B, H, P, hs].
    generate(input_ids, max_new_tokens, *, temperature, top_k, generator, use_cache).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        max_len: int,
        d_ff: int | None = None,
    ):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if d_ff is None:
            d_ff = 4 * d_model

        self.vocab_size = vocab_size
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.max_len = max_len
        self.d_ff = d_ff

        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied: the same Parameter

        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2-like: N(0, 0.02) for weights, zero biases, scaled residual projections.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            else:
                std = 0.02
                if name.endswith("out_proj.weight") or name.endswith("down_proj.weight"):
                    std = 0.02 / math.sqrt(2 * self.num_layers)
                nn.init.normal_(p, mean=0.0, std=std)

    @staticmethod
    def _cache_len(cache: list | None) -> int:
        if cache is None:
            return 0
        return cache[0][0].shape[2]

    def forward(
        self, input_ids: Tensor, targets: Tensor | None = None, cache: list | None = None
    ) -> tuple[Tensor, Tensor | None, list]:
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be [B, T] with T >= 1, got {tuple(input_ids.shape)}")
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache has {len(cache)} entries, expected {len(self.blocks)}")
        B, T = input_ids.shape
        P = self._cache_len(cache)
        if P + T > self.max_len:
            raise ValueError(f"{P} cached + {T} new tokens exceed max_len={self.max_len}")

        positions = torch.arange(P, P + T, device=input_ids.device)
        x = self.token_embedding(input_ids) + self.position_embedding(positions)  # [B, T, C]

        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)

        logits = self.lm_head(self.ln_f(x))  # [B, T, V]

        loss = None
        if targets is not None:
            if targets.shape != input_ids.shape:
                raise ValueError(
                    f"targets {tuple(targets.shape)} must match input_ids {tuple(input_ids.shape)}"
                )
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
            )
        return logits, loss, new_cache

    @torch.no_grad()
    def generate(
        self,
        input_ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Tensor:
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be [B, T] with T >= 1, got {tuple(input_ids.shape)}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if input_ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError(
                f"{input_ids.shape[1]} + {max_new_tokens} tokens exceed max_len={self.max_len}"
            )
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {top_k}")

        seq = input_ids.clone()
        if max_new_tokens == 0:
            return seq

        cache = None
        step_input = seq
        for step in range(max_new_tokens):
            if use_cache:
                logits, _, cache = self(step_input, cache=cache)
            else:
                logits, _, _ = self(seq)
            next_tok = pick_next_token(logits[:, -1, :], temperature, top_k, generator)
            seq = torch.cat([seq, next_tok.to(seq.dtype)], dim=1)
            step_input = next_tok
        return seq


def pick_next_token(logits: Tensor, temperature: float, top_k: int | None, generator) -> Tensor:
    """[B, V] logits -> [B, 1] int64 tokens: the argmax at temperature 0, else one draw each."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True).long()
    scaled = logits / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]  # [B, 1] the k-th largest
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = F.softmax(scaled, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).long()


class Block(nn.Module):
    """One pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); returns (x, its cache)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=1e-5)
        self.attn = CausalSelfAttention(d_model, num_heads)
        self.ln_2 = nn.LayerNorm(d_model, eps=1e-5)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, x: Tensor, past: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        a, kv = self.attn(self.ln_1(x), past)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, kv


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention over the held tokens (past) and the new ones."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_size = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _heads(self, t: Tensor) -> Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, self.head_size).transpose(1, 2)  # [B, H, T, hs]

    def forward(self, x: Tensor, past: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        B, T, C = x.shape
        q = self._heads(self.q_proj(x))
        k = self._heads(self.k_proj(x))
        v = self._heads(self.v_proj(x))
        if past is not None:
            past_k, past_v = past
            k = torch.cat([past_k.to(device=k.device, dtype=k.dtype), k], dim=2)
            v = torch.cat([past_v.to(device=v.device, dtype=v.dtype), v], dim=2)
        S = k.shape[2]
        P = S - T

        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_size)  # [B, H, T, S]
        # Bottom-right aligned causal mask: new token i (position P + i) sees keys 0..P + i.
        q_pos = torch.arange(P, S, device=x.device).unsqueeze(1)  # [T, 1]
        k_pos = torch.arange(S, device=x.device).unsqueeze(0)  # [1, S]
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
        # Softmax in at least float32 for stability, then back to the working dtype.
        work = torch.promote_types(scores.dtype, torch.float32)
        weights = F.softmax(scores, dim=-1, dtype=work).to(v.dtype)

        out = (weights @ v).transpose(1, 2).reshape(B, T, C)  # heads side by side
        return self.out_proj(out), (k, v)


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff)
        self.down_proj = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.gelu(self.up_proj(x), approximate="none"))

"""Kata【decoder-only 语言模型（GPT-2 风格）：训练它，再用 KV 缓存生成】: a GPT-2 style decoder-only language model that trains and generates with its KV cache."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TinyCausalLM(nn.Module):
    """A GPT-2 style decoder-only language model: token and learned position embeddings, a
    stack of pre-norm causal blocks, a final LayerNorm and an output head tied to the token
    embedding. It trains through forward(input_ids, targets) and generates with a KV cache.

    Sizes: B batch, T the tokens of this call, V vocab_size, C d_model, H num_heads,
    hs = C // H the head size, d_ff the MLP's hidden width, P the tokens a cache holds.

    __init__(vocab_size, d_model, num_heads, num_layers, max_len, d_ff=None)
        - d_ff defaults to 4 * d_model; num_layers >= 1; raise ValueError when d_model is
          not divisible by num_heads.
        - exactly these parameters, named as the grader copies weights into them (GPT-2's
          layout; every nn.Linear but lm_head and every nn.LayerNorm has a bias; LayerNorm
          eps 1e-5; no dropout):
            token_embedding     nn.Embedding(vocab_size, d_model)
            position_embedding  nn.Embedding(max_len, d_model): learned, row p for position p
            blocks              nn.ModuleList of num_layers blocks; block i has
                blocks[i].ln_1  nn.LayerNorm(d_model)
                blocks[i].attn  q_proj, k_proj, v_proj, out_proj: each nn.Linear(d_model, d_model)
                blocks[i].ln_2  nn.LayerNorm(d_model)
                blocks[i].mlp   up_proj nn.Linear(d_model, d_ff), down_proj nn.Linear(d_ff, d_model)
            ln_f                nn.LayerNorm(d_model)
            lm_head             nn.Linear(d_model, vocab_size, bias=False) whose weight IS
                                token_embedding.weight: tied, the very same nn.Parameter
                                (self.lm_head.weight = self.token_embedding.weight), not a copy.
          The initialisation is yours to choose: the grader copies its own weights in.

    forward(input_ids [B, T], targets=None, cache=None) -> (logits [B, T, V], loss, cache)
        - input_ids: int64 token ids in 0..V-1, T >= 1.
        - positions: the T tokens sit at positions P .. P + T - 1, P the number of tokens
          the cache holds (0 without one): x = token_embedding(input_ids) +
          position_embedding(positions). Raise ValueError when P + T > max_len.
        - each block, pre-norm: x = x + attn(ln_1(x)), then x = x + mlp(ln_2(x)), with
          mlp(h) = down_proj(GELU(up_proj(h))), the exact (erf) GELU.
        - attn: causal multi-head self-attention. q, k, v = q_proj, k_proj, v_proj of its
          input, each split into H heads (head h takes columns h*hs .. (h+1)*hs - 1);
          scores q @ k^T / sqrt(hs); new token i (at position P + i) attends to every held
          token and to the new tokens 0..i, never to a later one; softmax over the keys;
          the heads back side by side (head h in columns h*hs ..), then out_proj.
        - logits = lm_head(ln_f(x)), at every position.
        - loss: None without targets. targets [B, T] int64 is ALIGNED with input_ids:
          targets[b, t] is the token that should follow position t (the caller shifts;
          forward never does), and -100 marks a position left out of the loss. The loss is
          the mean cross-entropy over the other positions, a 0-d tensor that backpropagates
          into every parameter:
          F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100).
        - cache: a list with one pair (k, v) per block, in block order, each [B, H, P, hs]:
          the keys and values of the held tokens, as that block's k_proj and v_proj give
          them, split into heads (k before any scaling). forward returns the cache of every
          token so far, [B, H, P + T, hs] per tensor (the held tokens, then the new ones):
          pass it back with the next tokens to decode incrementally (cache=None in, the
          cache of the T tokens out). forward never changes the cache it is given (build
          new tensors, e.g. with torch.cat), so one prefix's cache can serve several
          continuations.
        - feeding a sequence in pieces (a prefix, then the rest, or one token at a time,
          each call with the cache the previous one returned) gives the logits of one pass
          over the whole sequence.
        - logits, loss and cache follow the parameters' dtype.

    generate(input_ids [B, T], max_new_tokens, *, temperature=0.0, top_k=None,
             generator=None, use_cache=True) -> [B, T + max_new_tokens] int64
        - returns input_ids followed by exactly max_new_tokens new tokens per row (there is
          no end-of-sequence token); max_new_tokens = 0 returns the prompt.
        - raise ValueError, before any forward, when T + max_new_tokens > max_len (the
          returned sequence never exceeds max_len; filling it exactly is fine) or when
          temperature < 0.
        - each new token comes from the logits of the LAST position of the sequence so far:
            temperature == 0: greedy, the argmax of each row (top_k and generator unused).
            temperature > 0: probabilities softmax(logits / temperature) after top-k (with
            top_k an int >= 1: every logit below the row's top_k-th largest becomes -inf;
            None, or top_k >= V, keeps every token), one token drawn per row, from
            `generator` only (e.g. torch.multinomial(probs, 1, generator=generator)); the
            same generator state gives the same tokens. generator=None means torch's
            global RNG.
        - use_cache=True: one forward over the prompt, then each step feeds ONLY the new
          token with the cache; use_cache=False: each step runs forward over the whole
          sequence so far, without a cache. Both give the same tokens.
        - runs without autograd (torch.no_grad()); the module's train()/eval() mode is left
          as it is.

    Conventions (judged apart from the math, as production code would need them):
        - bad sizes and settings raise ValueError: d_model not divisible by num_heads,
          P + T > max_len in forward, T + max_new_tokens > max_len or a negative
          temperature in generate.
        - every random number generate draws comes from `generator`: given one, torch's
          global RNG is left untouched, and the same generator state gives the same tokens.
        - results follow input_ids' device: logits, loss and cache (the positions and the
          causal mask made inside forward too), and generate's tokens.
        - no input is changed in place: input_ids, targets and the cache given to forward
          (its list and its tensors), input_ids given to generate.
        - a model in float64 (model.double()): float64 inputs are computed in float64
          throughout (no step in float32).
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
        # TODO: d_ff defaults to 4 * d_model; the heads must split d_model evenly (ValueError).
        # TODO: token and (learned) position embeddings, the blocks in an nn.ModuleList, ln_f.
        # TODO: lm_head without a bias, its weight the token embedding's own Parameter (tied).
        raise NotImplementedError

    def forward(
        self, input_ids: Tensor, targets: Tensor | None = None, cache: list | None = None
    ) -> tuple[Tensor, Tensor | None, list]:
        # TODO: the new tokens' positions continue after the held ones (P = the cache's length).
        # TODO: every block, each with its own part of the cache; collect the cache they return.
        # TODO: the final LayerNorm, then the tied head: logits at every position.
        # TODO: the loss on targets as given (no shift here), ignoring the -100 positions.
        raise NotImplementedError

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
        # TODO: refuse what cannot be done before running anything.
        # TODO: each step: with the cache, the whole prompt first, then only the newest token
        # TODO: (without it, the whole sequence so far); the next token from the LAST position's
        # TODO: logits (pick_next_token below), appended to the sequence.
        raise NotImplementedError


def pick_next_token(logits: Tensor, temperature: float, top_k: int | None, generator) -> Tensor:
    """[B, V] logits -> [B, 1] int64 tokens: the argmax at temperature 0, else one draw each."""
    # TODO: greedy at temperature 0.
    # TODO: scale by the temperature; keep the top_k largest logits of each row.
    # TODO: one draw per row, from the generator only.
    raise NotImplementedError


class Block(nn.Module):
    """One pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); returns (x, its cache)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        # TODO: ln_1, attn, ln_2, mlp (GPT-2's names).
        raise NotImplementedError

    def forward(self, x: Tensor, past: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        # TODO: normalise what goes INTO each branch; add the branch to the un-normalised stream.
        raise NotImplementedError


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention over the held tokens (past) and the new ones."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        # TODO: the four projections, with biases.
        raise NotImplementedError

    def forward(self, x: Tensor, past: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        # TODO: queries, keys and values of the new tokens, split into heads: (B, H, T, hs).
        # TODO: the held keys and values first, then the new ones (new tensors: past stays as it is).
        # TODO: causal, aligned bottom-right: new token i (position S - T + i) sees keys 0..S - T + i.
        # TODO: softmax over the keys, weighted sum of the values, heads side by side, out_proj.
        raise NotImplementedError


class MLP(nn.Module):
    """Position-wise feed-forward: up_proj (C -> d_ff), exact GELU, down_proj (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        # TODO: up_proj and down_proj, with biases.
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        # TODO: the exact GELU (erf), not the tanh approximation.
        raise NotImplementedError

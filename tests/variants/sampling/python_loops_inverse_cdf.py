"""Variant of sampling (correct): row by row in Python floats (sorted lists), inverse-CDF draws."""

import math

import torch


def _filter_row(row, temperature, top_k, top_p, keep):
    scores = [x / temperature for x in row]
    order = sorted(range(len(scores)), key=lambda j: -scores[j])  # most likely first
    if top_k > 0:
        for j in order[max(top_k, keep) :]:
            scores[j] = -math.inf
    if top_p < 1.0:
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        mass = 0.0
        for position, j in enumerate(order):
            if position >= keep and mass >= top_p:
                scores[j] = -math.inf
            mass += weights[j] / total
    return scores


def filter_logits(logits, *, temperature=1.0, top_k=0, top_p=1.0, min_tokens_to_keep=1):
    if not temperature > 0:
        raise ValueError("temperature must be > 0")
    if top_k < 0:
        raise ValueError("top_k must be >= 0")
    if not 0 < top_p <= 1:
        raise ValueError("top_p must be in (0, 1]")
    V = logits.shape[-1]
    rows = logits.detach().reshape(-1, V).cpu().double().tolist()
    out = [_filter_row(row, temperature, top_k, top_p, max(min_tokens_to_keep, 1)) for row in rows]
    return torch.tensor(out, dtype=torch.float64).reshape(logits.shape).to(dtype=logits.dtype, device=logits.device)


def sample_next_token(logits, *, generator, temperature=1.0, top_k=0, top_p=1.0):
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    if temperature == 0:
        return logits.max(dim=-1).indices
    scores = filter_logits(logits.double(), temperature=temperature, top_k=top_k, top_p=top_p)
    probs = torch.softmax(scores, dim=-1)
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(logits.shape[0], 1, generator=generator, device=logits.device, dtype=torch.float64)
    tokens = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return tokens.squeeze(-1).clamp(max=logits.shape[-1] - 1)

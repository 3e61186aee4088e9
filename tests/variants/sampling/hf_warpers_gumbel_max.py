"""Variant of sampling (correct): Hugging Face's warpers (top-p on an ascending sort), Gumbel-max draws."""

import torch


def filter_logits(logits, *, temperature=1.0, top_k=0, top_p=1.0, min_tokens_to_keep=1):
    if temperature <= 0:
        raise ValueError("temperature must be strictly positive")
    if top_k < 0:
        raise ValueError("top_k must be non-negative")
    if top_p <= 0 or top_p > 1:
        raise ValueError("top_p must be in (0, 1]")
    scores = logits.double() if logits.dtype == torch.float64 else logits.float()
    scores = scores / temperature
    if top_k > 0:
        top_k = min(max(top_k, min_tokens_to_keep), scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[..., -min_tokens_to_keep:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(-1, sorted_indices, sorted_indices_to_remove)
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
    return scores.type_as(logits)


def sample_next_token(logits, *, generator, temperature=1.0, top_k=0, top_p=1.0):
    if temperature < 0:
        raise ValueError("negative temperature")
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    scores = filter_logits(logits.float(), temperature=temperature, top_k=top_k, top_p=top_p)
    uniform = torch.rand(scores.shape, generator=generator, device=scores.device)
    gumbel = -torch.log(-torch.log(uniform))
    return torch.argmax(scores + gumbel, dim=-1)

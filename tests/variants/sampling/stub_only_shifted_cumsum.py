"""Variant of sampling, written from the stub alone: top-p by the shifted cumulative sum, torch.multinomial draws."""

import torch
from torch import Tensor


def filter_logits(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_tokens_to_keep: int = 1,
) -> Tensor:
    """Scale logits [..., V] by the temperature and remove the tokens top-k and top-p reject.

    V is the vocabulary size; logits may have any leading dimensions ([V], [B, V],
    [A, B, V]) and each row of V is filtered on its own. Three steps, in this order (the
    order and meaning of Hugging Face's TemperatureLogitsWarper, TopKLogitsWarper and
    TopPLogitsWarper):

    1. temperature: scores = logits / temperature. temperature must be > 0 (else
       ValueError); below 1 sharpens the distribution, above 1 flattens it.
    2. top-k, when top_k > 0: keep the k tokens with the largest scores, where
       k = max(top_k, min_tokens_to_keep); every other token's score becomes -inf.
       top_k = 0 turns it off; k >= V keeps every token. top_k < 0 raises ValueError.
    3. top-p (nucleus), when top_p < 1: take the probabilities softmax(scores) of the
       scores left after step 2 (tokens removed there have probability 0, the others
       are renormalised). Going from the most likely token down, keep the smallest set
       whose cumulative probability reaches top_p: a token survives when the total
       probability of the tokens MORE likely than it is still below top_p, so the token
       that crosses top_p is kept. The min_tokens_to_keep most likely tokens always
       survive. top_p = 1.0 turns it off; top_p outside (0, 1] raises ValueError.

    min_tokens_to_keep (an int >= 1, default 1): at least this many tokens survive
    (fewer only when V is smaller), as in Hugging Face's warpers.

    A token whose logit is already -inf (banned) has probability 0: it stays -inf, and
    it still counts as a token for top-k and min_tokens_to_keep. A row whose every logit
    is -inf is undefined and never judged. The tests use logits without ties and never put
    top_p within 2e-3 of a cumulative probability, where rounding alone would decide.

    Returns:
        The scores logits / temperature, with every removed token set to -inf: a new
        tensor of the logits' shape, dtype and device (logits is left unchanged).
        float16 and bfloat16 logits are computed in float32 and returned in their own
        dtype; float64 logits are computed in float64.

    Example:
        >>> filter_logits(torch.tensor([2.0, 1.0, 0.0, -1.0]), temperature=0.5, top_k=3, top_p=0.9)
        tensor([4., 2., -inf, -inf])
    """
    _check_filter_args(temperature, top_k, top_p, min_tokens_to_keep)
    if logits.dim() == 0:
        raise ValueError("logits must have at least one dimension [..., V]")

    # Step 1: temperature, computed in float32 (float64 stays float64).
    compute_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    scores = logits.to(compute_dtype) / temperature  # always a new tensor
    vocab = scores.shape[-1]
    if vocab == 0:
        return scores.to(logits.dtype) if logits.is_floating_point() else scores
    neg_inf = float("-inf")

    # Step 2: top-k. Banned (-inf) tokens still count as tokens here.
    if top_k > 0:
        k = min(max(int(top_k), int(min_tokens_to_keep)), vocab)
        if k < vocab:
            kth_largest = torch.topk(scores, k, dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth_largest, neg_inf)

    # Step 3: top-p (nucleus) on the distribution left after top-k.
    if top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        cum = torch.cumsum(sorted_probs, dim=-1)
        # Probability mass of the tokens strictly more likely than each token.
        mass_before = torch.cat([torch.zeros_like(cum[..., :1]), cum[..., :-1]], dim=-1)
        remove_sorted = mass_before >= top_p
        remove_sorted[..., : min(int(min_tokens_to_keep), vocab)] = False
        remove = torch.zeros_like(remove_sorted).scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, neg_inf)

    return scores.to(logits.dtype) if logits.is_floating_point() else scores


def sample_next_token(
    logits: Tensor,
    *,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Tensor:
    """Pick one next token per row of logits [B, V]: greedy, or a draw from the filtered distribution.

    - temperature == 0: greedy decoding: the argmax over V of each row (top_k and top_p
      change nothing then); no randomness is used.
    - temperature > 0: the distribution softmax(filter_logits(logits, temperature=...,
      top_k=..., top_p=...)) of each row (min_tokens_to_keep 1), and one token drawn from
      it per row, each row independently of the others. A token the filters removed is
      never drawn.
    - temperature < 0: ValueError.

    generator (keyword only, required): a torch.Generator on the logits' device, the ONLY
    source of randomness: pass it to every random call (torch.multinomial(...,
    generator=generator), torch.rand(..., generator=generator)). The global RNG (the one
    torch.manual_seed sets) must be left untouched, and the same generator state must give
    the same tokens. Any correct sampling method is accepted (torch.multinomial, inverse
    CDF, Gumbel-max...): the tests check the draws' frequencies, not which random numbers
    were used.

    Returns:
        int64 [B] on the logits' device: the token id (0..V-1) of each row. logits is
        left unchanged; float16 and bfloat16 logits are handled in float32.
    """
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError("logits must have shape [B, V] with V > 0")
    lead_shape = logits.shape[:-1]
    rows = logits.reshape(-1, logits.shape[-1])

    if temperature == 0:
        _check_filter_args(1.0, top_k, top_p, 1)
        compute_dtype = torch.float64 if rows.dtype == torch.float64 else torch.float32
        return rows.to(compute_dtype).argmax(dim=-1).reshape(lead_shape)

    scores = filter_logits(
        rows.float() if rows.dtype in (torch.float16, torch.bfloat16) else rows,
        temperature=temperature, top_k=top_k, top_p=top_p, min_tokens_to_keep=1,
    )
    probs = torch.softmax(scores, dim=-1)
    # Removed tokens have probability exactly 0 and are never drawn by multinomial.
    tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
    return tokens.to(torch.int64).reshape(lead_shape)


def _check_filter_args(temperature: float, top_k: int, top_p: float, min_tokens_to_keep: int) -> None:
    """Raise ValueError on any argument outside the documented ranges."""
    if not temperature > 0:  # also rejects NaN
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0, got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if isinstance(min_tokens_to_keep, bool) or int(min_tokens_to_keep) != min_tokens_to_keep or min_tokens_to_keep < 1:
        raise ValueError(f"min_tokens_to_keep must be an integer >= 1, got {min_tokens_to_keep}")

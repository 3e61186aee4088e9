"""Kata【下一个 token 采样：温度、top-k、top-p（核采样）】: next-token sampling: temperature, top-k and top-p (nucleus) filtering, as Hugging Face's logits warpers."""

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

    1. temperature: scores = logits / temperature. temperature must be > 0; below 1
       sharpens the distribution, above 1 flattens it.
    2. top-k, when top_k > 0: keep the k tokens with the largest scores, where
       k = max(top_k, min_tokens_to_keep); every other token's score becomes -inf.
       top_k = 0 turns it off; k >= V keeps every token.
    3. top-p (nucleus), when top_p < 1: take the probabilities softmax(scores) of the
       scores left after step 2 (tokens removed there have probability 0, the others
       are renormalised). Going from the most likely token down, keep the smallest set
       whose cumulative probability reaches top_p: a token survives when the total
       probability of the tokens MORE likely than it is still below top_p, so the token
       that crosses top_p is kept. The min_tokens_to_keep most likely tokens always
       survive. top_p = 1.0 turns it off.

    min_tokens_to_keep (an int >= 1, default 1): at least this many tokens survive
    (fewer only when V is smaller), as in Hugging Face's warpers.

    A token whose logit is already -inf (banned) has probability 0: it stays -inf, and
    it still counts as a token for top-k and min_tokens_to_keep. A row whose every logit
    is -inf is undefined and never judged. The tests use logits without ties and never put
    top_p within 2e-3 of a cumulative probability, where rounding alone would decide.

    Returns:
        The scores logits / temperature, with every removed token set to -inf: a new
        tensor of the logits' shape and dtype.

    Conventions (judged apart from the math, as production code would need them):
        - bad settings raise ValueError: temperature <= 0, top_k < 0, top_p outside (0, 1].
        - float16 and bfloat16 logits are computed in float32 and returned in their own dtype.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the result is made on the logits' device.
        - logits is never changed in place.

    Example:
        >>> filter_logits(torch.tensor([2.0, 1.0, 0.0, -1.0]), temperature=0.5, top_k=3, top_p=0.9)
        tensor([4., 2., -inf, -inf])
    """
    # TODO: validate: temperature > 0, top_k >= 0, 0 < top_p <= 1 (ValueError otherwise).
    # TODO: step 1: divide by the temperature, in float32 (float64 for float64 logits).
    # TODO: step 2: top-k: every score below the k-th largest becomes -inf (k = max(top_k, min_tokens_to_keep)).
    # TODO: step 3: top-p on the probabilities of the scores left after top-k, sorted from
    # TODO: the most likely down: remove a token once the tokens before it reach top_p.
    raise NotImplementedError


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

    generator (keyword only, required): a torch.Generator on the logits' device, the ONLY
    source of randomness: pass it to every random call (torch.multinomial(...,
    generator=generator), torch.rand(..., generator=generator)). Any correct sampling
    method is accepted (torch.multinomial, inverse CDF, Gumbel-max...): the tests check
    the draws' frequencies, not which random numbers were used.

    Returns:
        int64 [B]: the token id (0..V-1) of each row.

    Conventions (judged apart from the math, as production code would need them):
        - a negative temperature raises ValueError.
        - every random number comes from `generator`: the global RNG (torch.manual_seed's)
          is left untouched, and the same generator state gives the same tokens.
        - float16 and bfloat16 logits are handled in float32.
        - the tokens are made on the logits' device.
        - logits is never changed in place.
    """
    # TODO: reject a negative temperature; temperature 0 is greedy: the argmax of each row.
    # TODO: filter, softmax, then one draw per row from the generator (never the global RNG).
    raise NotImplementedError

"""Kata【束搜索（beam search），同 Hugging Face 的 _beam_search】: beam search as Hugging Face's GenerationMixin._beam_search (transformers >= 4.50), for one prompt."""

from collections.abc import Callable

import torch
from torch import Tensor


def beam_search(
    step_logprobs: Callable[[Tensor], Tensor],
    prompt: Tensor,
    *,
    num_beams: int,
    max_new_tokens: int,
    eos_token_id: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = True,
) -> tuple[list[list[int]], list[float]]:
    """Beam search over the model `step_logprobs`, as transformers' vectorized `_beam_search` (>= 4.50).

    prompt: long [P], P >= 1: the tokens the search starts from.
    step_logprobs(seqs): the model. It takes long [n, t] (whole sequences, the prompt
    included; any n >= 1) and returns the log-probabilities [n, V] of the next token of
    each row (float32 or float64). It is pure and deterministic: call it on whatever rows
    you like, as often as you like.

    Write K = num_beams. A hypothesis is the list of tokens generated after the prompt;
    one ended by EOS includes the EOS token. Its score is
        sum of its tokens' log-probabilities / len(hypothesis) ** length_penalty
    (the length counts generated tokens only, EOS included; never the prompt).

    The search keeps K running beams (raw score: the plain sum of log-probs, never
    normalized) and up to K finished hypotheses (normalized score):
    1. start: one running beam, the prompt with raw score 0 (HF fills the other K - 1 slots
       with -1e9 so that the first step expands the prompt only); no finished hypothesis.
    2. each step t = 0 .. max_new_tokens - 1: every running beam b and token v make the
       candidate raw score running[b] + logp[b, v]; keep the best 2 * K candidates (the
       extra K are a backup: beams that end here must not leave fewer than K running).
    3. a candidate ends if v == eos_token_id or t == max_new_tokens - 1 (length reached).
    4. finished: only ending candidates ranked among the first K of the 2K may finish; each
       gets its normalized score raw / (t + 1) ** length_penalty; keep the best K finished
       hypotheses (old and new together).
    5. running: the best K of the 2K candidates that did NOT end, by raw score (a finished
       hypothesis never grows again).
    6. stop after step t when: early_stopping is True and K hypotheses are finished; or no
       running beam can improve: K are finished and
           best running raw score / L ** length_penalty <= the worst finished score,
       where L = max_new_tokens if early_stopping == "never" and length_penalty > 0, else
       L = t + 1 (HF's heuristic, also for early_stopping=False); or t == max_new_tokens - 1.

    early_stopping: True, False or "never" (the three values of HF's GenerationConfig).
    length_penalty > 0 favours longer hypotheses, < 0 shorter ones, 0 scores plain sums.
    The tests never make two compared scores tie, and keep V > num_beams (or
    length_penalty <= 0) so that a real hypothesis always fills every finished slot.

    Returns:
        (hypotheses, scores): K hypotheses, best first (lists of Python ints), and their
        normalized scores (Python floats), sorted from the highest score down.

    Conventions (judged apart from the math, as production code would need them):
        - bad settings raise ValueError: num_beams < 1, max_new_tokens < 1, early_stopping
          not True, False or "never", a prompt that is not 1-D with at least one token.
        - scores are summed in float64, whatever dtype step_logprobs returns.
        - float64 inputs are computed in float64 throughout (no step in float32).
        - the result is plain Python: lists of ints and floats, no tensors.
        - prompt is never changed in place.

    Example (V = 3, token 2 is EOS; after token 1 the model favours EOS, otherwise token 1):
        >>> after_1 = torch.tensor([0.0, -1.0, 1.0]).log_softmax(-1)
        >>> other = torch.tensor([0.0, 1.0, -1.0]).log_softmax(-1)
        >>> model = lambda seqs: torch.where(seqs[:, -1:] == 1, after_1, other)
        >>> beam_search(model, torch.tensor([0]), num_beams=2, max_new_tokens=3, eos_token_id=2)
        ([[1, 2], [0, 1, 2]], [-0.40760594606399536, -0.7409392595291138])
    """
    # TODO: validate the settings and the prompt (ValueError).
    # TODO: K running slots, the prompt in slot 0 (raw score 0), the others dead.
    # TODO: each step: the best 2K candidates (running score + logp, flattened b*V+v); the first K
    # TODO: that end (EOS, or the last step) finish with raw / (t + 1) ** length_penalty; the best K
    # TODO: that did not end run on; then stop as step 6 says. Return the finished, best first.
    raise NotImplementedError

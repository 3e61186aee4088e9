"""Variant of beam_search (correct): plain Python lists, one model call per beam, candidates sorted by hand."""

import math


def beam_search(step_logprobs, prompt, *, num_beams, max_new_tokens, eos_token_id, length_penalty=1.0,
                early_stopping=True):
    if not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError("num_beams must be a positive int")
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if not (early_stopping is True or early_stopping is False or early_stopping == "never"):
        raise ValueError("early_stopping must be True, False or 'never'")
    if prompt.ndim != 1 or len(prompt) == 0:
        raise ValueError("prompt must be 1-D and non-empty")

    start = prompt.tolist()
    beams = [(0.0, [])]  # (raw sum of log-probs, generated tokens): only the live beams
    done = []  # (normalized score, generated tokens)
    for step in range(1, max_new_tokens + 1):
        candidates = []
        for score, tokens in beams:
            row = step_logprobs(prompt.new_tensor([start + tokens]))[0].double().tolist()
            candidates += [(score + lp, tokens + [v]) for v, lp in enumerate(row)]
        candidates.sort(key=lambda c: c[0], reverse=True)
        candidates = candidates[: 2 * num_beams]

        def ends(c):
            return c[1][-1] == eos_token_id or step == max_new_tokens

        for score, tokens in candidates[:num_beams]:
            if ends((score, tokens)):
                done.append((score / step**length_penalty, tokens))
        done = sorted(done, key=lambda d: d[0], reverse=True)[:num_beams]
        beams = [c for c in candidates if not ends(c)][:num_beams]

        if step == max_new_tokens or not beams:
            break
        if len(done) == num_beams:
            if early_stopping is True:
                break
            horizon = max_new_tokens if (early_stopping == "never" and length_penalty > 0) else step
            if beams[0][0] / math.pow(horizon, length_penalty) <= done[-1][0]:
                break
    return [tokens for _, tokens in done], [float(score) for score, _ in done]

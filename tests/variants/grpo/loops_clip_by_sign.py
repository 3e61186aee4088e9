"""Variant of grpo, Python loops over groups and rows, the std written out, the clip chosen by the advantage's sign (min(r, 1 + eps) for A >= 0, max(r, 1 - eps) for A < 0), a bool mask."""

import torch


def group_advantages(rewards, group_size, eps=1e-4):
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError("need groups of at least 2 and a whole number of them")
    out = []
    for start in range(0, len(rewards), group_size):
        r = rewards[start : start + group_size]
        m = r.sum() / group_size
        s = torch.sqrt(((r - m) ** 2).sum() / (group_size - 1))
        out.append((r - m) / (s + eps))
    return torch.cat(out)


def grpo_loss(logps, old_logps, ref_logps, advantages, completion_mask, clip_eps=0.2, beta=0.04):
    keep = completion_mask.bool()
    rows = []
    for b in range(logps.shape[0]):
        a = advantages[b]
        r = (logps[b] - old_logps[b]).exp()
        bounded = torch.where(a >= 0, torch.clamp(r, max=1 + clip_eps), torch.clamp(r, min=1 - clip_eps))
        term = -a * bounded
        if beta:
            delta = ref_logps[b] - logps[b]
            term = term + beta * (delta.exp() - 1 - delta)
        n = keep[b].sum()
        total = torch.where(keep[b], term, torch.zeros_like(term)).sum()
        rows.append(total / torch.clamp(n, min=1).to(term.dtype))
    return torch.stack(rows).mean()

"""Variant of ppo, in CleanRL's style: steps stacked, the max of the negated surrogates, half in float64."""

import torch


def gae(rewards, values, dones, last_value, gamma=0.99, lam=0.95):
    compute = torch.float64 if rewards.dtype in (torch.float16, torch.bfloat16) else rewards.dtype
    rewards, values = rewards.detach().to(compute), values.detach().to(compute)
    nonterminal = torch.where(dones.bool(), 0.0, 1.0).to(compute)
    num_steps = rewards.shape[1]
    lastgaelam = 0.0
    steps = []
    for t in reversed(range(num_steps)):
        nextvalues = last_value.detach().to(compute) if t == num_steps - 1 else values[:, t + 1]
        delta = rewards[:, t] + gamma * nextvalues * nonterminal[:, t] - values[:, t]
        lastgaelam = delta + gamma * lam * nonterminal[:, t] * lastgaelam
        steps.append(lastgaelam)
    advantages = torch.stack(steps[::-1], dim=1)
    return advantages.to(last_value.dtype), (advantages + values).to(last_value.dtype)


def ppo_clip_loss(
    logps, old_logps, advantages, values, old_values, returns, mask, clip_eps=0.2, value_clip_eps=0.2, value_coef=0.5
):
    out_dtype = logps.dtype
    compute = torch.float64 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    newlogprob, b_logprobs, mb_advantages = logps.to(compute), old_logps.to(compute), advantages.to(compute)
    newvalue, b_values, b_returns = values.to(compute), old_values.to(compute), returns.to(compute)
    keep = mask.bool()
    zero = torch.zeros((), dtype=compute, device=logps.device)

    def masked_mean(x):
        return torch.where(keep, x, zero).sum() / keep.sum()

    logratio = newlogprob - b_logprobs
    ratio = logratio.exp()
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2))

    v_loss_unclipped = (newvalue - b_returns) ** 2
    v_clipped = b_values + torch.clamp(newvalue - b_values, -value_clip_eps, value_clip_eps)
    v_loss_clipped = (v_clipped - b_returns) ** 2
    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
    v_loss = 0.5 * masked_mean(v_loss_max)

    loss = pg_loss + v_loss * value_coef
    return loss.to(out_dtype), pg_loss.to(out_dtype), v_loss.to(out_dtype)

"""GAE baseline: verl's compute_gae_advantage_return as its documentation and source describe it (a reverse
Python loop over T, vectorised over B, masked carries, torch.stack, then masked_whiten over the batch with
unbiased variance and eps 1e-8). Written for this benchmark from that description; not verl's code."""
import torch

from common import token_batch


def masked_mean(x, mask):
    return (x * mask).sum() / (mask.sum() + 1e-8)


def masked_whiten(x, mask):
    mean = masked_mean(x, mask)
    centered = x - mean
    var = masked_mean(centered * centered, mask)
    count = mask.sum()
    var = var * count / (count - 1)
    return centered * torch.rsqrt(var + 1e-8)


def gae_verl_style(rewards, values, mask, gamma, lam, whiten):
    with torch.no_grad():
        next_values = torch.zeros_like(values[:, 0])
        last_gae = torch.zeros_like(values[:, 0])
        reversed_adv = []
        for t in reversed(range(rewards.shape[1])):
            m = mask[:, t]
            delta = rewards[:, t] + gamma * next_values - values[:, t]
            candidate = delta + gamma * lam * last_gae
            next_values = values[:, t] * m + (1 - m) * next_values
            last_gae = candidate * m + (1 - m) * last_gae
            reversed_adv.append(last_gae)
        advantages = torch.stack(reversed_adv[::-1], dim=1)
        returns = advantages + values
        if whiten:
            advantages = masked_whiten(advantages, mask)
    return advantages, returns


def run(spec):
    (rewards, values), mask = token_batch(spec, 2)
    gamma, lam, whiten = spec.get("gamma", 1.0), spec.get("lambda", 0.95), spec.get("whiten", True)
    return lambda: gae_verl_style(rewards, values, mask, gamma, lam, whiten)

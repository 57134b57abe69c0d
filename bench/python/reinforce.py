"""REINFORCE++ returns baseline: verl's reinforce_plus_plus as docs/conventions.md describes it (reverse Python loop over T,
vectorised over B: running = r_t + gamma * running; returns[:, t] = running; running *= mask[:, t]; then
masked_whiten(returns) * mask). Written for this benchmark."""
import torch

from common import token_batch
from gae import masked_whiten


def reinforce_plus_plus(rewards, mask, gamma, whiten):
    with torch.no_grad():
        returns = torch.zeros_like(rewards)
        running = torch.zeros_like(rewards[:, 0])
        for t in reversed(range(rewards.shape[1])):
            running = rewards[:, t] + gamma * running
            returns[:, t] = running
            running = running * mask[:, t]
        advantages = masked_whiten(returns, mask) * mask if whiten else returns
    return advantages, returns


def run(spec):
    (rewards,), mask = token_batch(spec, 1)
    return lambda: reinforce_plus_plus(rewards, mask, spec.get("gamma", 1.0), spec.get("whiten", True))

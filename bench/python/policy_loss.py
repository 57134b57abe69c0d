"""Policy-loss baselines, written for this benchmark from verl's formulas (docs/conventions.md):
- `policy_loss`: compute_policy_loss_vanilla (log-ratio clamp 20, clip 0.2/0.2, dual clip 3) plus the k3
  (low_var_kl) KL term with coefficient 0.001, token-mean aggregation, then autograd's backward to logp.
- `fused`: the same loss from logits [N, V]: log_softmax, gather of the targets (verl's logprobs_from_logits
  without flash-attn), the loss, and backward to the logits.
"""
import torch

from common import token_batch


def masked_mean(x, m):
    return (x * m).sum() / (m.sum() + 1e-8)


def ppo_loss(logp, old, adv, mask, ref=None, kl_coef=0.001):
    d = torch.clamp(logp - old, -20.0, 20.0)
    ratio = torch.exp(d)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 0.8, 1.2)
    lc = torch.maximum(l1, l2)
    l3 = -adv * 3.0
    pg = torch.where(adv < 0, torch.minimum(l3, lc), lc)
    loss = masked_mean(pg, mask)
    if ref is not None:
        e = torch.clamp(ref - logp, -20.0, 20.0)
        k3 = torch.clamp(torch.exp(e) - e - 1, -10.0, 10.0)
        loss = loss + kl_coef * masked_mean(k3, mask)
    with torch.no_grad():  # the metrics verl reports
        _ = masked_mean(torch.gt(l2, l1).float(), mask)
        _ = masked_mean(-d, mask)
    return loss


def run(spec):
    (u1, u2, u3, u4), mask = token_batch(spec, 4)
    logp = (-1.0 - u1).requires_grad_(True)
    old = logp.detach() + 0.1 * (u2 - 0.5)
    adv = u3 - 0.5
    ref = logp.detach() - 0.1 * u4

    def step():
        logp.grad = None
        ppo_loss(logp, old, adv, mask, ref).backward()
        return logp.grad

    return step


def run_fused(spec):
    N, V = spec["N"], spec["V"]
    device = spec.get("device", "cpu")
    g = torch.Generator().manual_seed(1)
    logits = (2.0 * torch.randn(N, V, generator=g)).to(device).requires_grad_(True)
    targets = torch.randint(0, V, (N,), generator=g).to(device)
    old = torch.full((N,), -3.0, device=device)
    adv = torch.full((N,), 0.5, device=device)
    mask = torch.ones(N, device=device)

    def step():
        logits.grad = None
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        ppo_loss(logp, old, adv, mask).backward()
        return logits.grad

    return step
